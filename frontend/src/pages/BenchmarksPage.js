import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Button, Card, CardBody, Flex, FlexItem, PageSection } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { Link, useNavigate } from 'react-router';
import { isMissingRoute } from '../api/client';
import { useBenchmarks, useDeleteBenchmark } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { ConfirmModal } from '../components/ConfirmModal';
import { PageHeader } from '../components/PageHeader';
import { RunStatusLabel } from '../components/RunStatusLabel';
import { Empty, ErrorState, Loading } from '../components/States';
import { formatDuration, formatTimestamp } from '../lib/format';
export default function BenchmarksPage() {
    const runs = useBenchmarks();
    const canMutate = useCanMutate();
    const navigate = useNavigate();
    const [selected, setSelected] = useState([]);
    const [deleting, setDeleting] = useState(null);
    const remove = useDeleteBenchmark();
    const toggle = (id, on) => setSelected((s) => (on ? [...s.filter((x) => x !== id), id].slice(-2) : s.filter((x) => x !== id)));
    const actions = (_jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, children: [_jsx(FlexItem, { children: _jsx(Button, { variant: "secondary", isDisabled: selected.length !== 2, onClick: () => void navigate(`/benchmarks/compare?a=${selected[0]}&b=${selected[1]}`), children: "Compare selected" }) }), canMutate && (_jsx(FlexItem, { children: _jsx(ButtonLink, { to: "/benchmarks/new", variant: "primary", children: "New benchmark" }) }))] }));
    let body;
    if (runs.isPending)
        body = _jsx(Loading, { what: "benchmark runs" });
    else if (runs.isError && isMissingRoute(runs.error))
        body = _jsx(Empty, { title: "Benchmarks are not available on this server" });
    else if (runs.isError)
        body = _jsx(ErrorState, { what: "benchmark runs", error: runs.error, onRetry: () => void runs.refetch() });
    else if (runs.data.length === 0) {
        body = (_jsx(Empty, { title: "No benchmark runs yet", children: canMutate ? 'Start one with “New benchmark”: it measures TTFT, decode rate and latency of loaded models.' : 'An admin can start one.' }));
    }
    else {
        body = (_jsxs(Table, { "aria-label": "Benchmark runs", variant: "compact", gridBreakPoint: "grid-md", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { screenReaderText: "Select" }), _jsx(Th, { children: "Name" }), _jsx(Th, { children: "Status" }), _jsx(Th, { children: "Mode" }), _jsx(Th, { children: "Scenarios" }), _jsx(Th, { children: "Requests ok / failed" }), _jsx(Th, { children: "Created" }), _jsx(Th, { children: "Duration" }), canMutate && _jsx(Th, { screenReaderText: "Actions" })] }) }), _jsx(Tbody, { children: runs.data.map((run, rowIndex) => (_jsxs(Tr, { "data-run-id": run.id, children: [_jsx(Td, { select: { rowIndex, isSelected: selected.includes(run.id), onSelect: (_e, on) => toggle(run.id, on) }, "aria-label": `Select ${run.name ?? run.id} for comparison` }), _jsx(Td, { dataLabel: "Name", children: _jsx(Link, { to: `/benchmarks/${run.id}`, children: run.name ?? run.id.slice(0, 8) }) }), _jsx(Td, { dataLabel: "Status", children: _jsx(RunStatusLabel, { status: run.status }) }), _jsx(Td, { dataLabel: "Mode", children: run.mode }), _jsx(Td, { dataLabel: "Scenarios", children: run.scenarios.length }), _jsxs(Td, { dataLabel: "Requests", children: [run.successfulRequests, " / ", run.failedRequests, " of ", run.totalRequests] }), _jsx(Td, { dataLabel: "Created", children: formatTimestamp(run.createdAt) }), _jsx(Td, { dataLabel: "Duration", children: formatDuration(run.durationSeconds) }), canMutate && (_jsx(Td, { dataLabel: "Actions", children: _jsx(Button, { variant: "link", isDanger: true, size: "sm", onClick: () => setDeleting(run), children: "Delete" }) }))] }, run.id))) })] }));
    }
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Benchmarks", description: "Load tests against loaded models; select two runs to compare them.", actions: actions }), _jsx(PageSection, { children: _jsx(Card, { children: _jsx(CardBody, { children: body }) }) }), deleting && (_jsx(ConfirmModal, { title: `Delete run ${deleting.name ?? deleting.id}?`, confirmLabel: "Delete", danger: true, busy: remove.isPending, error: remove.error, onCancel: () => {
                    setDeleting(null);
                    remove.reset();
                }, onConfirm: () => remove.mutate(deleting.id, {
                    onSuccess: () => {
                        setSelected((s) => s.filter((x) => x !== deleting.id));
                        setDeleting(null);
                    },
                }), children: _jsxs("p", { children: ["The run, its scenarios and their metrics are deleted", deleting.status === 'running' ? ' (it is cancelled first)' : '', "."] }) }))] }));
}
