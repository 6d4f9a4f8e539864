import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Alert, Button, Card, CardBody, CardTitle, DescriptionList, DescriptionListDescription, DescriptionListGroup, DescriptionListTerm, Flex, FlexItem, PageSection, Progress, ProgressMeasureLocation, } from '@patternfly/react-core';
import { useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { useParams } from 'react-router';
import { keys, useBenchmark, useCancelBenchmark } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { BarChart } from '../components/BarChart';
import { ButtonLink } from '../components/ButtonLink';
import { MetricsTable } from '../components/MetricsTable';
import { PageHeader } from '../components/PageHeader';
import { RunStatusLabel } from '../components/RunStatusLabel';
import { ErrorState, Loading } from '../components/States';
import { useEventStream } from '../hooks/useEventStream';
import { applyProgress, GRID_ROWS, GRID_STATS, gridValue, latencyBars, scenarioPercent, scenarioTitle } from '../lib/benchmarks';
import { LatencyCdf } from '../components/LatencyCdf';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { formatDuration, formatMs, formatTimestamp } from '../lib/format';
function ScenarioProgress({ s, index, progress }) {
    const percent = scenarioPercent(s, progress);
    const phase = progress && s.status === 'running' ? ` · ${progress.phase} ${progress.completed}/${progress.total}` : '';
    return (_jsxs("div", { className: "sz-mb-md", "data-scenario-id": s.id, children: [_jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, children: [_jsx(FlexItem, { children: scenarioTitle(s, index) }), _jsx(FlexItem, { children: _jsx(RunStatusLabel, { status: s.status }) }), s.promptSource === 'approximate' && _jsx(FlexItem, { children: "(prompt sizes approximate: no tokenizer endpoint)" })] }), _jsx(Progress, { value: percent, title: `${s.successfulRequests} ok, ${s.failedRequests} failed${phase}`, measureLocation: ProgressMeasureLocation.outside, variant: s.status === 'failed' ? 'danger' : s.status === 'completed' ? 'success' : undefined, "aria-label": `Scenario ${index + 1} progress` }), s.errorMessage && _jsx(Alert, { isInline: true, isPlain: true, variant: "danger", title: s.errorMessage })] }));
}
/** One scenario's results: a grid (latency families x statistics), goodput and throughput,
 * and its latency distributions with the SLA. */
function ScenarioResults({ s, index }) {
    const m = s.metrics;
    if (!m)
        return null;
    return (_jsx(PageSection, { children: _jsxs(Card, { "data-results-for": s.id, children: [_jsx(CardTitle, { children: scenarioTitle(s, index) }), _jsxs(CardBody, { children: [_jsxs(Table, { "aria-label": `Results of scenario ${index + 1}`, variant: "compact", className: "sz-mb-md", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Metric" }), GRID_STATS.map((stat) => (_jsx(Th, { modifier: "nowrap", children: stat.toLowerCase() }, stat)))] }) }), _jsx(Tbody, { children: GRID_ROWS.map((row) => (_jsxs(Tr, { "data-grid-row": row.prefix, children: [_jsx(Td, { dataLabel: "Metric", children: row.label }), GRID_STATS.map((stat) => (_jsx(Td, { dataLabel: stat.toLowerCase(), modifier: "nowrap", children: row.format(gridValue(m, row.prefix, stat)) }, stat)))] }, row.prefix))) })] }), _jsxs("p", { className: "sz-mb-md", children: ["Goodput ", m.goodputCount, " of ", s.successfulRequests, " ok (", m.goodputPercent.toFixed(1), "%", s.slaThresholdMs !== null ? `, E2E within ${formatMs(s.slaThresholdMs)}` : ', no SLA', ") \u00B7", ' ', m.requestsPerSecond.toFixed(2), " req/s \u00B7 ", m.tokensPerSecondTotal.toFixed(1), " output tok/s"] }), _jsx(LatencyCdf, { metrics: m, slaMs: s.slaThresholdMs })] })] }) }));
}
/** Applies one SSE event of the run to the cached run. */
function applyEvent(run, event, data) {
    if (event === 'snapshot' || event === 'done')
        return data;
    if (!run)
        return run;
    if (event === 'status')
        return { ...run, status: data.status };
    if (event === 'scenario') {
        const sc = data;
        return { ...run, scenarios: run.scenarios.map((s) => (s.id === sc.id ? sc : s)) };
    }
    return run;
}
export default function BenchmarkRunPage() {
    const { id = '' } = useParams();
    const run = useBenchmark(id);
    const qc = useQueryClient();
    const canMutate = useCanMutate();
    const cancel = useCancelBenchmark();
    const [progress, setProgress] = useState({});
    const stream = useEventStream(`/api/benchmarks/${encodeURIComponent(id)}/events`, {
        onMessage: ({ event, data }) => {
            const payload = JSON.parse(data);
            if (event === 'progress') {
                const p = payload;
                setProgress((all) => ({ ...all, [p.scenarioId]: p }));
                // The counters shown are the run's own, kept as the API counts them.
                qc.setQueryData(keys.benchmark(id), (old) => (old ? applyProgress(old, p) : old));
                return;
            }
            qc.setQueryData(keys.benchmark(id), (old) => applyEvent(old, event, payload));
            if (event === 'done')
                void qc.invalidateQueries({ queryKey: keys.benchmarks, exact: true });
        },
    }, false);
    if (run.isPending)
        return _jsx(Loading, { what: "the benchmark run" });
    if (run.isError)
        return _jsx(ErrorState, { what: "the benchmark run", error: run.error, onRetry: () => void run.refetch() });
    const r = run.data;
    const finished = r.status === 'completed' || r.status === 'failed' || r.status === 'cancelled';
    const withMetrics = r.scenarios.filter((s) => s.metrics !== null);
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: r.name ?? `Run ${r.id.slice(0, 8)}`, description: _jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, children: [_jsx(FlexItem, { children: _jsx(RunStatusLabel, { status: r.status }) }), _jsx(FlexItem, { children: !finished && stream.state === 'open' ? 'live' : '' })] }), actions: _jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, children: [canMutate && !finished && (_jsx(FlexItem, { children: _jsx(Button, { variant: "danger", onClick: () => cancel.mutate(r.id), isLoading: cancel.isPending, children: "Cancel run" }) })), _jsx(FlexItem, { children: _jsx(ButtonLink, { to: "/benchmarks", variant: "secondary", children: "All runs" }) })] }) }), r.errorMessage && (_jsx(PageSection, { children: _jsx(Alert, { isInline: true, variant: r.status === 'cancelled' ? 'warning' : 'danger', title: r.errorMessage }) })), _jsx(PageSection, { children: _jsxs(Card, { children: [_jsx(CardTitle, { children: "Progress" }), _jsxs(CardBody, { children: [_jsx(DescriptionList, { isCompact: true, isHorizontal: true, columnModifier: { lg: '2Col' }, className: "sz-mb-md", children: [
                                        ['Mode', r.mode],
                                        ['kvcached', r.kvcachedEnabled ? 'on' : 'off'],
                                        ['Created', formatTimestamp(r.createdAt)],
                                        ['Duration', formatDuration(r.durationSeconds)],
                                        ['Requests', `${r.successfulRequests} ok, ${r.failedRequests} failed of ${r.totalRequests}`],
                                    ].map(([term, value]) => (_jsxs(DescriptionListGroup, { children: [_jsx(DescriptionListTerm, { children: term }), _jsx(DescriptionListDescription, { "data-run-field": term.toLowerCase(), children: value })] }, term))) }), r.scenarios.map((s, i) => (_jsx(ScenarioProgress, { s: s, index: i, progress: progress[s.id] }, s.id)))] })] }) }), withMetrics.length > 0 && (_jsxs(_Fragment, { children: [r.scenarios.map((s, i) => (s.metrics ? _jsx(ScenarioResults, { s: s, index: i }, s.id) : null)), _jsx(PageSection, { children: _jsxs(Card, { children: [_jsx(CardTitle, { children: "Latency percentiles, all scenarios (ms)" }), _jsx(CardBody, { children: _jsx(BarChart, { groups: latencyBars(r), format: formatMs }) })] }) }), _jsx(PageSection, { children: _jsxs(Card, { children: [_jsx(CardTitle, { children: "All metrics by scenario" }), _jsx(CardBody, { children: _jsx(MetricsTable, { scenarios: r.scenarios }) })] }) })] }))] }));
}
