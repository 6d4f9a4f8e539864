import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Content, Label } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { formatBytes } from '../lib/format';
import { orderedPods, POD_STATE_COLOR } from '../lib/cluster';
import { Terms } from './Terms';
/** The seed's ClusterOverview: mode, leader, term and quorum, then one row per pod with
 *  its failure-detector state and GPU figures (as this pod last heard them). */
export function ClusterOverview({ status }) {
    const noLeader = status.leader === null;
    return (_jsxs(_Fragment, { children: [_jsx(Terms, { items: [
                    ['Mode', _jsx("span", { "data-testid": "cluster-mode", children: status.mode })],
                    [
                        'Leader',
                        _jsx("span", { "data-testid": "cluster-leader", children: noLeader ? (_jsx(Label, { color: "red", isCompact: true, children: "none: election under way, or no quorum (admin changes are refused)" })) : (status.leader) }),
                    ],
                    ['Term', _jsx("span", { "data-testid": "cluster-term", children: status.term })],
                    ['Quorum', status.quorum !== undefined && status.size !== undefined ? `${status.quorum} of ${status.size} pods` : '—'],
                    ['Answered by', status.podId ?? '—'],
                ] }), _jsxs(Table, { "aria-label": "Pods", variant: "compact", gridBreakPoint: "grid-md", className: "sz-mt-md", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Pod" }), _jsx(Th, { modifier: "fitContent", children: "Address" }), _jsx(Th, { modifier: "fitContent", children: "State" }), _jsx(Th, { children: "GPUs" }), _jsx(Th, { modifier: "fitContent", children: "Instances" }), _jsx(Th, { modifier: "fitContent", children: "Last heard" })] }) }), _jsx(Tbody, { children: orderedPods(status).map((pod) => (_jsxs(Tr, { "data-pod-id": pod.id, "data-state": pod.state, "data-leader": pod.isLeader ? 'true' : 'false', children: [_jsxs(Td, { dataLabel: "Pod", children: [_jsx("strong", { children: pod.id }), ' ', pod.isLeader && (_jsx(Label, { color: "blue", isCompact: true, children: "leader" })), ' ', pod.self && (_jsx(Label, { variant: "outline", isCompact: true, children: "this pod" }))] }), _jsx(Td, { dataLabel: "Address", className: "sz-mono", children: pod.address }), _jsx(Td, { dataLabel: "State", children: _jsx(Label, { color: POD_STATE_COLOR[pod.state], isCompact: true, children: pod.state }) }), _jsxs(Td, { dataLabel: "GPUs", children: [pod.gpus.length === 0 && 'no GPU', pod.gpus.map((g) => (_jsxs(Content, { component: "small", className: "sz-nowrap", "data-gpu-index": g.index, children: ["GPU ", g.index, " ", g.name, ": ", formatBytes(g.usedBytes), " / ", formatBytes(g.totalBytes), _jsx("br", {})] }, g.index)))] }), _jsx(Td, { dataLabel: "Instances", children: pod.instances.length }), _jsx(Td, { dataLabel: "Last heard", modifier: "nowrap", children: pod.self ? 'now' : pod.lastSeenSecondsAgo == null ? 'never' : `${pod.lastSeenSecondsAgo.toFixed(1)} s ago` })] }, pod.id))) })] })] }));
}
