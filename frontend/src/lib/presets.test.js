import { describe, expect, it } from 'vitest';
import { ApiError } from '../api/client';
import { toBody, toForm, EMPTY_PRESET_MODEL, parseModelsJson } from './presetForm';
import { describeStep, errorAt, fieldErrors, foldApply, IDLE_APPLY, planSummary, refusedSteps } from './presets';
const plan = {
    preset: 'prod',
    strategy: 'balanced',
    nothingToDo: false,
    steps: [
        { action: 'unload', model: 'old', podId: 'pod-b', instanceId: 'i-9', reason: 'not declared by the preset' },
        { action: 'load', model: 'qwen', podId: 'pod-c', gpuIds: [0, 1], reason: 'would go to pod-c, GPU 0: 11.2 GB free after' },
        { action: 'unschedulable', model: 'huge', reason: 'no pod can take it', reasons: { 'pod-b': 'needs 107 GB', 'pod-a': 'no GPU named like H100' } },
    ],
    satisfied: [],
    replicas: { qwen: 0, huge: 0 },
};
const event = (e, data) => ({ type: 'event', event: e, data: JSON.stringify(data) });
function run(actions) {
    return actions.reduce(foldApply, IDLE_APPLY);
}
describe('describeStep', () => {
    it('says where a load goes, what an unload removes and why, and each pod’s refusal', () => {
        const [unload, load, stuck] = plan.steps.map(describeStep);
        expect(load).toMatchObject({ title: 'Load qwen on pod pod-c, GPUs 0, 1', detail: 'would go to pod-c, GPU 0: 11.2 GB free after' });
        expect(unload).toMatchObject({ title: 'Unload old (i-9) from pod pod-b', detail: 'not declared by the preset' });
        expect(stuck?.title).toBe('huge fits nowhere');
        expect(stuck?.detail).toBe('No pod can take it:');
        expect(describeStep({ action: 'unschedulable', model: 'x', reason: 'no pod yet' }).detail).toBe('no pod yet');
        expect(stuck?.reasons).toEqual([
            ['pod-a', 'no GPU named like H100'],
            ['pod-b', 'needs 107 GB'],
        ]);
    });
    it('sums a plan up, or says there is nothing to do', () => {
        expect(planSummary(plan)).toBe('1 load, 1 unload, 1 unschedulable');
        expect(planSummary({ steps: [], nothingToDo: true })).toMatch(/^Nothing to do/);
    });
});
describe('foldApply (the apply stream)', () => {
    it('lists the plan’s steps as pending, then follows each step by index to done', () => {
        const p = run([
            { type: 'start' },
            event('plan', { ...plan, steps: plan.steps.slice(0, 2) }),
            event('step', { index: 0, ...plan.steps[0], state: 'running' }),
        ]);
        expect(p.phase).toBe('running');
        expect(p.steps.map((s) => s.state)).toEqual(['running', 'pending']);
        const end = run([
            { type: 'start' },
            event('plan', { ...plan, steps: plan.steps.slice(0, 2) }),
            event('step', { index: 0, ...plan.steps[0], state: 'done' }),
            event('step', { index: 1, ...plan.steps[1], state: 'running' }),
            event('step', { index: 1, ...plan.steps[1], state: 'failed', error: 'refused', code: 'model_does_not_fit' }),
            event('done', { state: 'failed', failed: 1, steps: 2 }),
            { type: 'closed' },
        ]);
        expect(end.phase).toBe('finished');
        expect(end.error).toBeNull();
        expect(end.steps.map((s) => s.state)).toEqual(['done', 'failed']);
        expect(end.steps[1]).toMatchObject({ error: 'refused', code: 'model_does_not_fit', model: 'qwen' });
        expect(end.outcome).toEqual({ state: 'failed', failed: 1, steps: 2 });
    });
    it('calls a stream that ends without `done` an error, and ignores what is not JSON', () => {
        const p = run([{ type: 'start' }, event('plan', plan), { type: 'event', event: 'step', data: 'not json' }, { type: 'closed' }]);
        expect(p.steps).toHaveLength(3);
        expect(p.phase).toBe('finished');
        expect(p.error?.message).toMatch(/ended early/);
    });
    it('keeps the refusal and resets on a new start', () => {
        const refused = new ApiError(409, 'preset_apply_in_progress', 'busy');
        const p = run([{ type: 'start' }, { type: 'error', error: refused }]);
        expect(p.error).toBe(refused);
        expect(foldApply(p, { type: 'start' })).toEqual({ ...IDLE_APPLY, phase: 'starting' });
        expect(foldApply(p, { type: 'reset' })).toBe(IDLE_APPLY);
    });
});
describe('the API’s errors', () => {
    it('keys a 422 by field and shows nested fields at their parent', () => {
        const e = new ApiError(422, 'validation_error', 'invalid', {
            errors: [
                { field: 'models.0.replicas', message: 'Input should be greater than or equal to 0' },
                { field: 'models.1.extraArgs.2', message: 'bad arg' },
                { field: 'body', message: 'Value error, models[1].servedModelName appears twice' },
            ],
        });
        const f = fieldErrors(e);
        expect(errorAt(f, 'models.0.replicas')).toBe('Input should be greater than or equal to 0');
        expect(errorAt(f, 'models.1.extraArgs')).toBe('bad arg');
        expect(errorAt(f, 'models.1.modelPath')).toBeUndefined();
        expect(errorAt(f, 'body')).toBe('models[1].servedModelName appears twice');
        expect(fieldErrors(new ApiError(409, 'x', 'y', { errors: [{ field: 'a', message: 'b' }] }))).toEqual({});
    });
    it('reads the unschedulable steps of a 409', () => {
        const steps = [plan.steps[2]];
        expect(refusedSteps(new ApiError(409, 'preset_unschedulable', 'no', { steps }))).toEqual(steps);
        expect(refusedSteps(new ApiError(409, 'preset_apply_in_progress', 'busy', { steps }))).toEqual([]);
    });
});
describe('presetForm', () => {
    it('turns rows into the PUT body and back', () => {
        const { body, errors } = toBody([
            { ...EMPTY_PRESET_MODEL, modelPath: ' org/m ', servedModelName: 'm', replicas: '2', engine: 'sim', gpuType: 'L4', minVramGiB: '20', extraArgs: "--memory-gib 2 --name 'a b'" },
        ]);
        expect(errors).toEqual({});
        expect(body?.models[0]).toEqual({
            modelPath: 'org/m',
            servedModelName: 'm',
            replicas: 2,
            tensorParallelSize: 1,
            sleepLevel: 0,
            pinned: false,
            engine: 'sim',
            gpuType: 'L4',
            minVramGiB: 20,
            extraArgs: ['--memory-gib', '2', '--name', 'a b'],
        });
        const back = toForm(body.models[0]);
        expect(toBody([back]).body).toEqual(body);
    });
    it('names the fields JSON cannot carry, as the server would', () => {
        const { body, errors } = toBody([EMPTY_PRESET_MODEL, { ...EMPTY_PRESET_MODEL, replicas: 'two', extraArgs: '"open' }]);
        expect(body).toBeNull();
        expect(Object.keys(errors).sort()).toEqual(['models.1.extraArgs', 'models.1.replicas']);
    });
});
describe('parseModelsJson', () => {
    it('takes the PUT body or the bare list, as written', () => {
        const m = { modelPath: 'a', servedModelName: 'a', replica: 2 }; // a typo: the server's 422 names it
        expect(parseModelsJson(JSON.stringify({ models: [m] }))).toEqual({ models: [m], error: null });
        expect(parseModelsJson(JSON.stringify([m]))).toEqual({ models: [m], error: null });
    });
    it('says what is wrong with the text', () => {
        expect(parseModelsJson('{"models": [').error).toMatch(/^Not JSON/);
        expect(parseModelsJson('{"model": []}').error).toMatch(/Expected/);
        expect(parseModelsJson('[1]').error).toMatch(/Expected/);
    });
});
