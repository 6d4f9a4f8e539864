import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Content } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { Link } from 'react-router';
import { formatBytes, formatNumber, formatUptime } from '../lib/format';
import { failureReason, gpuMemoryBytes, startingText } from '../lib/instanceRow';
import { useMetricsHistory } from '../hooks/MetricsHistory';
import { useNow } from '../hooks/useNow';
import { SimulatedLabel, StatusLabel } from './StatusLabel';
export function gpuText(inst) {
    if (inst.gpuIds.length === 0)
        return 'CPU';
    const tp = inst.tensorParallelSize > 1 ? ` (TP ${inst.tensorParallelSize})` : '';
    return `${inst.gpuIds.join(', ')}${tp}`;
}
/** Every instance: name, status (why it failed; how far and how long it has been starting), engine,
 * GPU(s) and the memory it holds there, port, requests/s of its model, uptime; in a
 * cluster, the pod that runs it. */
export function InstanceTable({ instances, actions, podOf }) {
    const now = useNow();
    const { points } = useMetricsHistory();
    const rates = [...points].reverse().find((p) => p.models !== null)?.models ?? null;
    const rps = (model) => {
        if (!rates)
            return '—';
        return formatNumber(rates.find((r) => r.model === model)?.requestsPerSecond ?? 0);
    };
    return (_jsxs(Table, { "aria-label": "Model instances", variant: "compact", gridBreakPoint: "grid-md", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Model" }), _jsx(Th, { modifier: "fitContent", children: "Status" }), podOf && _jsx(Th, { modifier: "fitContent", children: "Pod" }), _jsx(Th, { modifier: "fitContent", children: "Engine" }), _jsx(Th, { modifier: "fitContent", children: "GPU(s)" }), _jsx(Th, { modifier: "fitContent", children: "GPU memory" }), _jsx(Th, { modifier: "fitContent", children: "req/s" }), _jsx(Th, { modifier: "fitContent", children: "Port" }), _jsx(Th, { modifier: "fitContent", children: "Uptime" }), actions && _jsx(Th, { screenReaderText: actions.heading, modifier: "fitContent" })] }) }), _jsx(Tbody, { children: instances.map((inst) => (_jsxs(Tr, { "data-instance-id": inst.id, "data-status": inst.status, children: [_jsxs(Td, { dataLabel: "Model", children: [_jsx(Link, { to: `/models/${inst.id}`, children: inst.servedModelName }), _jsxs(Content, { component: "small", className: "sz-wrap-anywhere", children: [inst.displayName !== inst.servedModelName ? `${inst.displayName} · ` : '', inst.id] })] }), _jsxs(Td, { dataLabel: "Status", children: [_jsx("span", { children: _jsx(StatusLabel, { status: inst.status, sleepLevel: inst.sleepLevel }) }), inst.status === 'failed' && (_jsx(Content, { component: "small", className: "sz-failure-reason", title: inst.errorMessage ?? undefined, "data-failure-reason": true, children: failureReason(inst) })), inst.status === 'starting' && (_jsx(Content, { component: "small", className: "sz-nowrap", "data-starting-for": true, "data-load-phase": inst.loadPhase ?? undefined, children: startingText(inst, now) }))] }), podOf && (_jsx(Td, { dataLabel: "Pod", modifier: "nowrap", "data-pod-id": podOf(inst), children: podOf(inst) })), _jsx(Td, { dataLabel: "Engine", modifier: "nowrap", children: _jsxs("span", { children: [inst.engine, " ", inst.simulated && _jsx(SimulatedLabel, {})] }) }), _jsx(Td, { dataLabel: "GPU(s)", modifier: "nowrap", children: gpuText(inst) }), _jsx(Td, { dataLabel: "GPU memory", modifier: "nowrap", children: formatBytes(gpuMemoryBytes(inst)) }), _jsx(Td, { dataLabel: "req/s", modifier: "nowrap", children: inst.status === 'active' ? rps(inst.servedModelName) : '—' }), _jsx(Td, { dataLabel: "Port", className: "sz-mono", children: inst.port }), _jsx(Td, { dataLabel: "Uptime", modifier: "nowrap", children: inst.status === 'active' || inst.status === 'sleeping' ? formatUptime(inst.startedAt, now) : '—' }), actions && _jsx(Td, { dataLabel: actions.heading, children: actions.render(inst) })] }, inst.id))) })] }));
}
