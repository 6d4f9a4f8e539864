import { Fragment as _Fragment, jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, Card, CardBody, CardTitle, Flex, FlexItem, FormGroup, FormSelect, FormSelectOption, Label, PageSection, } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useSearchParams } from 'react-router';
import { ApiError } from '../api/client';
import { useBenchmark, useBenchmarks } from '../api/queries';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { compareValue, deltaText, METRICS, metricValue, pairScenarios } from '../lib/benchmarks';
import { formatTimestamp } from '../lib/format';
const runName = (r) => r.name ?? r.id.slice(0, 8);
function DeltaLabel({ delta, kind }) {
    const text = deltaText(delta, kind);
    if (text === '—')
        return _jsx(_Fragment, { children: "\u2014" });
    const color = delta.verdict === 'better' ? 'green' : delta.verdict === 'worse' ? 'red' : 'grey';
    return (_jsx(Label, { isCompact: true, color: color, "data-verdict": delta.verdict, children: text }));
}
function Comparison({ a, b }) {
    return (_jsx(_Fragment, { children: pairScenarios(a, b).map((pair) => (_jsx(PageSection, { children: _jsxs(Card, { "data-pair": pair.title, children: [_jsx(CardTitle, { children: pair.title }), _jsx(CardBody, { children: !pair.a || !pair.b ? (_jsx(Empty, { title: `Only run ${pair.a ? 'A' : 'B'} has this scenario`, children: "Scenarios are paired by model, routing, concurrency and token shape." })) : (_jsxs(Table, { "aria-label": `Comparison of ${pair.title}`, variant: "compact", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Metric" }), _jsxs(Th, { children: ["A: ", runName(a)] }), _jsxs(Th, { children: ["B: ", runName(b)] }), _jsx(Th, { children: "B vs A" })] }) }), _jsx(Tbody, { children: METRICS.map((m) => {
                                        const va = metricValue(pair.a?.metrics ?? null, m.key);
                                        const vb = metricValue(pair.b?.metrics ?? null, m.key);
                                        return (_jsxs(Tr, { children: [_jsx(Td, { dataLabel: "Metric", children: m.label }), _jsx(Td, { dataLabel: "A", children: m.format(va) }), _jsx(Td, { dataLabel: "B", children: m.format(vb) }), _jsx(Td, { dataLabel: "B vs A", children: _jsx(DeltaLabel, { delta: compareValue(va, vb, m.better), kind: m.delta }) })] }, m.key));
                                    }) })] })) })] }) }, pair.title))) }));
}
/** Two selects over the stored runs; choosing one rewrites `?a=&b=`. */
function RunPickers({ a, b, onPick }) {
    const runs = useBenchmarks();
    if (runs.isPending)
        return _jsx(Loading, { what: "the runs" });
    if (runs.isError)
        return _jsx(ErrorState, { what: "the runs", error: runs.error, onRetry: () => void runs.refetch() });
    const pick = (which, value) => (_jsx(FormGroup, { label: `Run ${which.toUpperCase()}`, fieldId: `compare-${which}`, children: _jsxs(FormSelect, { id: `compare-${which}`, value: runs.data.some((r) => r.id === value) ? value : '', onChange: (_, v) => onPick(which, v), "aria-label": `Run ${which.toUpperCase()}`, children: [_jsx(FormSelectOption, { value: "", label: "Choose a run", isPlaceholder: true }), runs.data.map((r) => (_jsx(FormSelectOption, { value: r.id, label: `${runName(r)} · ${r.status} · ${formatTimestamp(r.createdAt)}` }, r.id)))] }) }));
    return (_jsxs(Flex, { spaceItems: { default: 'spaceItemsMd' }, children: [_jsx(FlexItem, { children: pick('a', a) }), _jsx(FlexItem, { children: pick('b', b) })] }));
}
/** A fetched run, or why it cannot be shown (unknown id, or an answer that is not a run). */
function problem(id, q, which) {
    if (!id)
        return null;
    if (q.isError) {
        return q.error instanceof ApiError && q.error.status === 404
            ? `Run ${which} (${id}) does not exist: choose another.`
            : `Run ${which} could not be loaded: ${q.error.message}`;
    }
    if (q.data && !Array.isArray(q.data.scenarios))
        return `Run ${which} (${id}) is not a benchmark run.`;
    return null;
}
export default function BenchmarkComparePage() {
    const [params, setParams] = useSearchParams();
    const idA = params.get('a') ?? '';
    const idB = params.get('b') ?? '';
    const a = useBenchmark(idA);
    const b = useBenchmark(idB);
    const onPick = (which, id) => {
        const next = new URLSearchParams(params);
        if (id)
            next.set(which, id);
        else
            next.delete(which);
        setParams(next, { replace: true });
    };
    const problems = [problem(idA, a, 'A'), problem(idB, b, 'B')].filter((p) => p !== null);
    const ready = idA && idB && a.data && b.data && problems.length === 0;
    let body;
    if (ready)
        body = _jsx(Comparison, { a: a.data, b: b.data });
    else if ((idA && a.isPending) || (idB && b.isPending))
        body = _jsx(Loading, { what: "the runs" });
    else
        body = (_jsx(PageSection, { children: _jsx(Empty, { title: idA || idB ? 'Choose the other run' : 'Choose two runs', children: "Pick a run for A and one for B above, or select two on the Benchmarks page." }) }));
    const description = ready
        ? `A: ${runName(a.data)} (${formatTimestamp(a.data.createdAt)}) · B: ${runName(b.data)} (${formatTimestamp(b.data.createdAt)}). Green: B is better.`
        : undefined;
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Compare runs", description: description }), _jsxs(PageSection, { children: [_jsx(RunPickers, { a: idA, b: idB, onPick: onPick }), problems.map((p) => (_jsx(Alert, { isInline: true, variant: "warning", title: p, className: "sz-mt-md" }, p)))] }), body] }));
}
