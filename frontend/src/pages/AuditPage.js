import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Button, Card, CardBody, Label, PageSection } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { Link } from 'react-router';
import { isMissingRoute } from '../api/client';
import { useAudit } from '../api/queries';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { formatTimestamp } from '../lib/format';
const OUTCOME_COLOR = { ok: 'green', denied: 'orange', error: 'red' };
/** What the request acted on: the instance (linked), the model, the benchmark run. */
function AuditTarget({ entry }) {
    const parts = [];
    if (entry.instanceId)
        parts.push(_jsx("div", { className: "sz-mono", children: _jsx(Link, { to: `/models/${encodeURIComponent(entry.instanceId)}`, children: entry.instanceId }) }, "i"));
    if (entry.model)
        parts.push(_jsx("div", { children: entry.model }, "m"));
    if (entry.runId)
        parts.push(_jsx("div", { className: "sz-mono", children: _jsxs(Link, { to: `/benchmarks/${encodeURIComponent(entry.runId)}`, children: ["run ", entry.runId] }) }, "r"));
    return parts.length > 0 ? _jsx(_Fragment, { children: parts }) : _jsx(_Fragment, { children: "\u2014" });
}
function AuditTable({ entries }) {
    return (_jsxs(Table, { "aria-label": "Audit log", variant: "compact", gridBreakPoint: "grid-md", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Time" }), _jsx(Th, { children: "Who" }), _jsx(Th, { children: "Role" }), _jsx(Th, { children: "Request" }), _jsx(Th, { children: "Target" }), _jsx(Th, { children: "Status" }), _jsx(Th, { children: "From" })] }) }), _jsx(Tbody, { children: entries.map((e, i) => (_jsxs(Tr, { children: [_jsx(Td, { dataLabel: "Time", className: "sz-nowrap", children: formatTimestamp(e.at) }), _jsx(Td, { dataLabel: "Who", children: e.subject }), _jsx(Td, { dataLabel: "Role", children: e.role ?? '—' }), _jsxs(Td, { dataLabel: "Request", className: "sz-mono sz-wrap-anywhere", children: [e.method, " ", e.path] }), _jsx(Td, { dataLabel: "Target", className: "sz-wrap-anywhere", children: _jsx(AuditTarget, { entry: e }) }), _jsxs(Td, { dataLabel: "Status", children: [_jsxs(Label, { isCompact: true, color: OUTCOME_COLOR[e.outcome] ?? 'grey', children: [e.status, " ", e.outcome] }), e.code && _jsx("div", { className: "sz-mono pf-v6-u-font-size-xs", children: e.code })] }), _jsx(Td, { dataLabel: "From", children: e.remote ?? '—' })] }, e.id ?? `${e.at}-${i}`))) })] }));
}
export default function AuditPage() {
    // A stack of page cursors: null is the newest page.
    const [cursors, setCursors] = useState([null]);
    const cursor = cursors[cursors.length - 1] ?? null;
    const audit = useAudit(cursor);
    const oldest = audit.data?.[audit.data.length - 1]?.id ?? null;
    let body;
    if (audit.isPending)
        body = _jsx(Loading, { what: "the audit log" });
    else if (audit.isError && isMissingRoute(audit.error))
        body = _jsx(Empty, { title: "This server keeps no audit log yet" });
    else if (audit.isError)
        body = _jsx(ErrorState, { what: "the audit log", error: audit.error, onRetry: () => void audit.refetch() });
    else if (audit.data.length === 0)
        body = _jsx(Empty, { title: "Nothing recorded", children: "Loads, unloads and other changes appear here." });
    else
        body = _jsx(AuditTable, { entries: audit.data });
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Audit log", description: "Every state-changing admin request: who, what, when and how it ended. Newest first.", actions: _jsxs(_Fragment, { children: [_jsx(Button, { variant: "secondary", isDisabled: cursors.length === 1, onClick: () => setCursors((c) => c.slice(0, -1)), children: "Newer" }), ' ', _jsx(Button, { variant: "secondary", isDisabled: oldest === null || (audit.data?.length ?? 0) < 50, onClick: () => setCursors((c) => [...c, oldest]), children: "Older" })] }) }), _jsx(PageSection, { children: _jsx(Card, { children: _jsx(CardBody, { children: body }) }) })] }));
}
