import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { METRICS, metricValue, scenarioTitle } from '../lib/benchmarks';
/** Every metric (rows) of every scenario (columns). */
export function MetricsTable({ scenarios }) {
    return (_jsxs(Table, { "aria-label": "Benchmark results", variant: "compact", isStickyHeader: true, children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Metric" }), scenarios.map((s, i) => (_jsx(Th, { modifier: "wrap", children: scenarioTitle(s, i) }, s.id)))] }) }), _jsx(Tbody, { children: METRICS.map((m) => (_jsxs(Tr, { "data-metric": m.key, children: [_jsx(Td, { dataLabel: "Metric", children: m.label }), scenarios.map((s, i) => (_jsx(Td, { dataLabel: `#${i + 1}`, className: "sz-nowrap", children: m.format(metricValue(s.metrics, m.key)) }, s.id)))] }, m.key))) })] }));
}
