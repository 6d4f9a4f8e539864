import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Card, CardBody, CardTitle, FormSelect, FormSelectOption, Label, PageSection, Switch, Toolbar, ToolbarContent, ToolbarItem, } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { Link } from 'react-router';
import { useRequests, useUsage } from '../api/requests';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { formatMs, formatNumber, formatTimestamp } from '../lib/format';
import { EMPTY_FILTERS, formatTokens, statusColor } from '../lib/requests';
const STATUSES = [
    ['', 'All statuses'],
    ['2xx', '2xx success'],
    ['error', 'Errors (400+)'],
    ['4xx', '4xx refused'],
    ['5xx', '5xx failed'],
];
function RequestTable({ entries }) {
    return (_jsxs(Table, { "aria-label": "Request log", variant: "compact", gridBreakPoint: "grid-lg", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { modifier: "wrap", children: "Time" }), _jsx(Th, { modifier: "wrap", children: "Model" }), _jsx(Th, { modifier: "wrap", children: "Instance" }), _jsx(Th, { modifier: "wrap", children: "Status" }), _jsx(Th, { modifier: "wrap", children: "Latency" }), _jsx(Th, { modifier: "wrap", children: "TTFT" }), _jsx(Th, { modifier: "wrap", children: "Tokens in / out" }), _jsx(Th, { modifier: "wrap", children: "Key" }), _jsx(Th, { modifier: "wrap", children: "Request id" })] }) }), _jsx(Tbody, { children: entries.map((e) => (_jsxs(Tr, { "data-testid": "request-row", children: [_jsx(Td, { dataLabel: "Time", className: "sz-nowrap", children: formatTimestamp(e.at) }), _jsxs(Td, { dataLabel: "Model", className: "sz-wrap-anywhere", children: [e.model, e.stream && (_jsxs(_Fragment, { children: [' ', _jsx(Label, { isCompact: true, children: "stream" })] }))] }), _jsxs(Td, { dataLabel: "Instance", className: "sz-mono", children: [e.instanceId ? _jsx(Link, { to: `/models/${encodeURIComponent(e.instanceId)}`, children: e.instanceId }) : '—', e.pod && _jsx("div", { className: "pf-v6-u-font-size-xs pf-v6-u-color-200", children: e.pod })] }), _jsx(Td, { dataLabel: "Status", children: _jsx(Label, { isCompact: true, color: statusColor(e.status), children: e.status }) }), _jsx(Td, { dataLabel: "Latency", className: "sz-nowrap", children: formatMs(e.latencyMs) }), _jsx(Td, { dataLabel: "TTFT", className: "sz-nowrap", children: formatMs(e.ttftMs) }), _jsx(Td, { dataLabel: "Tokens in / out", className: "sz-nowrap", children: formatTokens(e.promptTokens, e.completionTokens) }), _jsx(Td, { dataLabel: "Key", children: e.keyId ?? '—' }), _jsx(Td, { dataLabel: "Request id", className: "sz-mono sz-wrap-anywhere", children: e.requestId })] }, e.id))) })] }));
}
function UsageTable({ rows }) {
    return (_jsxs(Table, { "aria-label": "Usage per key and model", variant: "compact", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { modifier: "wrap", children: "Key" }), _jsx(Th, { modifier: "wrap", children: "Model" }), _jsx(Th, { modifier: "wrap", children: "Requests" }), _jsx(Th, { modifier: "wrap", children: "Prompt tokens" }), _jsx(Th, { modifier: "wrap", children: "Completion tokens" })] }) }), _jsx(Tbody, { children: rows.map((r) => (_jsxs(Tr, { children: [_jsx(Td, { dataLabel: "Key", children: r.keyId === '_none' ? 'no key' : r.keyId }), _jsx(Td, { dataLabel: "Model", children: r.model }), _jsx(Td, { dataLabel: "Requests", children: formatNumber(r.requests) }), _jsx(Td, { dataLabel: "Prompt tokens", children: formatNumber(r.promptTokens) }), _jsx(Td, { dataLabel: "Completion tokens", children: formatNumber(r.completionTokens) })] }, `${r.keyId}/${r.model}`))) })] }));
}
function Select({ id, label, value, options, onChange }) {
    return (_jsx(FormSelect, { id: id, "aria-label": label, value: value, onChange: (_e, v) => onChange(v), children: options.map(([v, text]) => (_jsx(FormSelectOption, { value: v, label: text }, v))) }));
}
export default function RequestsPage() {
    const [filters, setFilters] = useState(EMPTY_FILTERS);
    const [live, setLive] = useState(true);
    const requests = useRequests(filters, live);
    const usage = useUsage(live);
    const set = (patch) => setFilters((f) => ({ ...f, ...patch }));
    const models = usage.data?.byModel.map((r) => r.model) ?? [];
    const keys = usage.data?.byKey.map((r) => r.keyId).filter((k) => k !== '_none') ?? [];
    let body;
    if (requests.isPending)
        body = _jsx(Loading, { what: "the request log" });
    else if (requests.isError)
        body = _jsx(ErrorState, { what: "the request log", error: requests.error, onRetry: () => void requests.refetch() });
    else if (requests.data.length === 0)
        body = _jsx(Empty, { title: "No requests", children: "Inference requests (/v1) appear here as they finish." });
    else
        body = _jsx(RequestTable, { entries: requests.data });
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Requests", description: "Finished inference requests, newest first: model, instance, status, latency, time to first token, tokens (from the engine's usage) and API key. Never bodies." }), _jsx(PageSection, { children: _jsx(Card, { children: _jsxs(CardBody, { children: [_jsx(Toolbar, { children: _jsxs(ToolbarContent, { children: [_jsx(ToolbarItem, { children: _jsx(Select, { id: "requests-model", label: "Model", value: filters.model, options: [['', 'All models'], ...models.map((m) => [m, m])], onChange: (model) => set({ model }) }) }), _jsx(ToolbarItem, { children: _jsx(Select, { id: "requests-status", label: "Status", value: filters.status, options: STATUSES, onChange: (status) => set({ status }) }) }), keys.length > 0 && (_jsx(ToolbarItem, { children: _jsx(Select, { id: "requests-key", label: "API key", value: filters.key, options: [['', 'All keys'], ...keys.map((k) => [k, k])], onChange: (key) => set({ key }) }) })), _jsx(ToolbarItem, { alignItems: "center", children: _jsx(Switch, { id: "requests-live", label: "Live", isChecked: live, onChange: (_e, v) => setLive(v) }) }), _jsx(ToolbarItem, { alignItems: "center", children: _jsxs("span", { "data-testid": "request-count", children: [requests.data?.length ?? 0, " shown"] }) })] }) }), body] }) }) }), _jsx(PageSection, { children: _jsxs(Card, { children: [_jsx(CardTitle, { children: "Usage per key and model" }), _jsx(CardBody, { children: usage.isPending ? (_jsx(Loading, { what: "usage" })) : usage.isError ? (_jsx(ErrorState, { what: "usage", error: usage.error, onRetry: () => void usage.refetch() })) : usage.data.rows.length === 0 ? (_jsx(Empty, { title: "Nothing counted yet" })) : (_jsx(UsageTable, { rows: usage.data.rows })) })] }) })] }));
}
