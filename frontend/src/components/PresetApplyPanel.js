import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, Content, Label, Spinner } from '@patternfly/react-core';
import { ApiError } from '../api/client';
import { refusedSteps } from '../lib/presets';
import { PresetSteps } from './PresetPlanView';
const OUTCOME_COLOR = { done: 'green', failed: 'red', cancelled: 'orange' };
/** The refusals an apply can get, in words an operator can act on. */
function ApplyRefused({ error }) {
    if (error instanceof ApiError && error.code === 'preset_unschedulable') {
        return (_jsx(Alert, { isInline: true, variant: "danger", title: "Not applied: a replica fits nowhere (nothing was done)", "data-testid": "apply-refused", "data-code": error.code, children: refusedSteps(error).length > 0 ? (_jsx(PresetSteps, { steps: refusedSteps(error), label: "Replicas that fit nowhere" })) : (_jsx(Content, { component: "p", children: error.message })) }));
    }
    if (error instanceof ApiError && error.code === 'preset_apply_in_progress') {
        return (_jsxs(Alert, { isInline: true, variant: "warning", title: "Another apply or reconcile pass is running", "data-testid": "apply-refused", "data-code": error.code, children: [error.message, " Wait for it to end (the preset\u2019s last run shows it), then apply again."] }));
    }
    const code = error instanceof ApiError ? error.code : undefined;
    return (_jsx(Alert, { isInline: true, variant: "danger", title: "The apply failed", "data-testid": "apply-refused", "data-code": code, children: error.message }));
}
/** An apply as it goes: each step's state from the stream, then the outcome. */
export function PresetApplyPanel({ progress }) {
    const { phase, steps, outcome, error } = progress;
    if (phase === 'idle')
        return null;
    return (_jsxs("div", { "data-testid": "apply-progress", "data-phase": phase, "data-outcome": outcome?.state ?? '', children: [phase === 'starting' && _jsx(Spinner, { size: "md", "aria-label": "Starting the apply" }), error && error.message && _jsx(ApplyRefused, { error: error }), steps.length > 0 && _jsx(PresetSteps, { steps: steps, label: "Apply progress" }), phase === 'running' && steps.length === 0 && _jsx(Content, { component: "p", children: "Planning\u2026" }), outcome && (_jsxs(Content, { component: "p", className: "sz-mt-md", children: [_jsx(Label, { color: OUTCOME_COLOR[outcome.state] ?? 'grey', "data-testid": "apply-outcome", children: outcome.state }), ' ', outcome.steps === 0
                        ? 'Nothing to do: the cluster already ran what the preset declares.'
                        : `${outcome.steps} step${outcome.steps > 1 ? 's' : ''}, ${outcome.failed} failed.`, outcome.failed > 0 && ' Apply again to retry what is missing (only that is done).'] }))] }));
}
