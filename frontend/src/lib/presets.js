// Pure helpers of the Presets page: plan steps in words, the apply stream folded
// into step states, the API's 422 errors keyed by field.
import { ApiError } from '../api/client';
function gpus(ids) {
    if (!ids || ids.length === 0)
        return '';
    return `, GPU${ids.length > 1 ? 's' : ''} ${ids.join(', ')}`;
}
export function describeStep(step) {
    const reasons = Object.entries(step.reasons ?? {}).sort(([a], [b]) => a.localeCompare(b));
    switch (step.action) {
        case 'load':
            return { title: `Load ${step.model} on pod ${step.podId ?? '?'}${gpus(step.gpuIds)}`, detail: step.reason ?? '', reasons };
        case 'unload':
            return {
                title: `Unload ${step.model}${step.instanceId ? ` (${step.instanceId})` : ''}${step.podId ? ` from pod ${step.podId}` : ''}`,
                detail: step.reason ?? '',
                reasons,
            };
        default:
            // The reason repeats every pod's; with them listed, a short lead-in is enough.
            return { title: `${step.model} fits nowhere`, detail: reasons.length > 0 ? 'No pod can take it:' : (step.reason ?? ''), reasons };
    }
}
/** One line summing a plan up: "2 loads, 1 unload, 1 unschedulable" or "nothing to do". */
export function planSummary(plan) {
    if (plan.nothingToDo || plan.steps.length === 0)
        return 'Nothing to do: the cluster runs what the preset declares.';
    const count = (a) => plan.steps.filter((s) => s.action === a).length;
    const parts = [];
    const loads = count('load');
    const unloads = count('unload');
    const stuck = count('unschedulable');
    if (loads)
        parts.push(`${loads} load${loads > 1 ? 's' : ''}`);
    if (unloads)
        parts.push(`${unloads} unload${unloads > 1 ? 's' : ''}`);
    if (stuck)
        parts.push(`${stuck} unschedulable`);
    return parts.join(', ');
}
export const IDLE_APPLY = { phase: 'idle', steps: [], plan: null, outcome: null, error: null };
/** The reducer of an apply's progress: `plan` lists the steps (all pending), each
 *  `step` replaces one by its index, `done` ends it. A stream that closes without
 *  `done` (the server went away) is an error: the apply may go on without us. */
export function foldApply(p, a) {
    switch (a.type) {
        case 'start':
            return { ...IDLE_APPLY, phase: 'starting' };
        case 'reset':
            return IDLE_APPLY;
        case 'error':
            return { ...p, phase: 'finished', error: a.error };
        case 'closed':
            return p.phase === 'finished'
                ? p
                : { ...p, phase: 'finished', error: new Error('The progress stream ended early: the apply may still be running (see the preset’s last run).') };
        case 'event':
            return foldEvent(p, a.event, a.data);
    }
}
function foldEvent(p, event, data) {
    let body;
    try {
        body = JSON.parse(data);
    }
    catch {
        return p; // a ping or junk: nothing to show
    }
    const obj = (body ?? {});
    if (event === 'plan') {
        const plan = obj;
        const steps = (plan.steps ?? []).map((s) => ({ ...s, state: 'pending' }));
        return { ...p, phase: 'running', plan, steps };
    }
    if (event === 'step' && typeof obj.index === 'number') {
        const { index, ...rest } = obj;
        const steps = [...p.steps];
        while (steps.length <= index)
            steps.push({ action: 'load', model: '?', state: 'pending' });
        steps[index] = rest;
        return { ...p, phase: 'running', steps };
    }
    if (event === 'done') {
        const outcome = {
            state: String(obj.state ?? 'done'),
            failed: Number(obj.failed ?? 0),
            steps: Number(obj.steps ?? p.steps.length),
        };
        return { ...p, phase: 'finished', outcome };
    }
    return p;
}
/** The 422's errors by field (`models.0.replicas`); anything else: {}. */
export function fieldErrors(error) {
    if (!(error instanceof ApiError) || error.status !== 422)
        return {};
    const list = error.body?.errors;
    const out = {};
    if (!Array.isArray(list))
        return out;
    for (const e of list) {
        const field = typeof e.field === 'string' ? e.field : 'body';
        const message = typeof e.message === 'string' ? e.message : 'invalid';
        (out[field] ??= []).push(message.replace(/^Value error, /, ''));
    }
    return out;
}
/** The messages for one field and what lies under it (`models.0.extraArgs.2` is
 *  shown at `models.0.extraArgs`); undefined when there is none. */
export function errorAt(errors, field) {
    const hits = Object.entries(errors)
        .filter(([f]) => f === field || f.startsWith(`${field}.`))
        .flatMap(([, m]) => m);
    return hits.length > 0 ? hits.join('; ') : undefined;
}
/** The 409 `preset_unschedulable`'s steps (each with its reasons per pod). */
export function refusedSteps(error) {
    if (!(error instanceof ApiError) || error.code !== 'preset_unschedulable')
        return [];
    const steps = error.body?.steps;
    return Array.isArray(steps) ? steps : [];
}
