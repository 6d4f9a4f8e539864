import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Content, Label, List, ListItem, Spinner } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { describeStep } from '../lib/presets';
const ACTION_COLOR = { load: 'blue', unload: 'orange', unschedulable: 'red' };
const STATE_COLOR = { pending: 'grey', running: 'blue', done: 'green', failed: 'red' };
function isRun(step) {
    return 'state' in step;
}
/** Per pod, why it cannot take a replica (an unschedulable step, a 409's steps). */
export function PodReasons({ reasons }) {
    if (reasons.length === 0)
        return null;
    return (_jsx(List, { isPlain: true, className: "sz-mt-xs", children: reasons.map(([pod, why]) => (_jsx(ListItem, { "data-pod-id": pod, children: _jsxs(Content, { component: "small", children: [_jsx("strong", { children: pod }), ": ", why] }) }, pod))) }));
}
/**
 * A preset's steps: a plan (what an apply would do) or a run (each step's state as the
 * apply goes). Loads say where and the scheduler's verdict, unloads why, unschedulable
 * replicas the reason per pod.
 */
export function PresetSteps({ steps, label }) {
    const run = steps.some(isRun);
    return (_jsxs(Table, { "aria-label": label, variant: "compact", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { modifier: "fitContent", children: "#" }), _jsx(Th, { modifier: "fitContent", children: "Action" }), _jsx(Th, { children: "Step" }), run && _jsx(Th, { modifier: "fitContent", children: "State" })] }) }), _jsx(Tbody, { children: steps.map((step, i) => {
                    const text = describeStep(step);
                    const state = isRun(step) ? step.state : undefined;
                    return (_jsxs(Tr, { "data-testid": "preset-step", "data-action": step.action, "data-state": state ?? 'planned', children: [_jsx(Td, { dataLabel: "#", children: i + 1 }), _jsx(Td, { dataLabel: "Action", children: _jsx(Label, { isCompact: true, color: ACTION_COLOR[step.action] ?? 'grey', children: step.action }) }), _jsxs(Td, { dataLabel: "Step", children: [_jsx("strong", { children: text.title }), text.detail && (_jsx(Content, { component: "small", className: "sz-wrap-anywhere", children: text.detail })), _jsx(PodReasons, { reasons: text.reasons }), isRun(step) && step.error && (_jsxs(Content, { component: "small", className: "sz-error-text", children: [step.code ? `${step.code}: ` : '', step.error] }))] }), run && (_jsxs(Td, { dataLabel: "State", modifier: "nowrap", children: [state === 'running' && _jsx(Spinner, { size: "sm", "aria-label": "running" }), ' ', _jsx(Label, { isCompact: true, color: STATE_COLOR[state ?? 'pending'] ?? 'grey', "data-testid": "preset-step-state", children: state ?? 'pending' })] }))] }, i));
                }) })] }));
}
