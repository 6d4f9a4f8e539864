import { jsxs as _jsxs, jsx as _jsx, Fragment as _Fragment } from "react/jsx-runtime";
import { Content } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { SAMPLE_SECONDS, useMetricsHistory } from '../hooks/MetricsHistory';
import { formatMs, formatNumber } from '../lib/format';
import { Empty } from './States';
const ms = (seconds) => formatMs(seconds === null ? null : seconds * 1000);
/** Requests per second and latency per model over the last sampling interval. */
export function RequestSummary() {
    const { points, error } = useMetricsHistory();
    const latest = [...points].reverse().find((p) => p.models !== null);
    if (error && !latest)
        return _jsxs(Content, { component: "p", children: ["Metrics unavailable: ", error.message] });
    if (!latest?.models)
        return _jsxs(Content, { component: "p", children: ["Measuring: the first rates appear after ", SAMPLE_SECONDS, " s."] });
    if (latest.models.length === 0) {
        return _jsx(Empty, { title: "No inference traffic yet", children: "Send OpenAI requests to /v1 with a loaded model's name." });
    }
    const total = latest.models.reduce((sum, m) => sum + m.requestsPerSecond, 0);
    return (_jsxs(_Fragment, { children: [_jsxs(Content, { component: "p", children: [_jsx("strong", { "data-testid": "total-rps", children: formatNumber(total) }), " requests/s in the last ", SAMPLE_SECONDS, " s"] }), _jsxs(Table, { "aria-label": "Requests per model", variant: "compact", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Model" }), _jsx(Th, { modifier: "fitContent", children: "req/s" }), _jsx(Th, { modifier: "fitContent", children: "p50" }), _jsx(Th, { modifier: "fitContent", children: "p95" }), _jsx(Th, { modifier: "fitContent", children: "5xx/s" }), _jsx(Th, { modifier: "fitContent", children: "In flight" })] }) }), _jsx(Tbody, { children: latest.models.map((m) => (_jsxs(Tr, { children: [_jsx(Td, { dataLabel: "Model", modifier: "breakWord", children: m.model }), _jsx(Td, { dataLabel: "req/s", children: formatNumber(m.requestsPerSecond) }), _jsx(Td, { dataLabel: "p50", children: ms(m.p50) }), _jsx(Td, { dataLabel: "p95", children: ms(m.p95) }), _jsx(Td, { dataLabel: "5xx/s", children: formatNumber(m.errorsPerSecond) }), _jsx(Td, { dataLabel: "In flight", children: m.inFlight })] }, m.model))) })] })] }));
}
