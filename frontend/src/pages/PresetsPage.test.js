import { jsx as _jsx } from "react/jsx-runtime";
// @vitest-environment happy-dom
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { cleanup, fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { MemoryRouter } from 'react-router';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AuthProvider } from '../auth/AuthContext';
import PresetsPage from './PresetsPage';
afterEach(() => {
    cleanup();
    vi.unstubAllGlobals();
});
const json = (body, status = 200) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
/** An SSE answer whose events arrive in separate chunks, one split mid-line. */
function sse(events) {
    const text = events.map(([e, d]) => `event: ${e}\r\ndata: ${JSON.stringify(d)}\r\n\r\n`).join(': ping\r\n\r\n');
    const cut = Math.floor(text.length / 2);
    const chunks = [text.slice(0, cut), text.slice(cut)];
    const body = new ReadableStream({
        start(c) {
            for (const chunk of chunks)
                c.enqueue(new TextEncoder().encode(chunk));
            c.close();
        },
    });
    return new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } });
}
const preset = {
    name: 'prod',
    models: [{ modelPath: 'org/a', servedModelName: 'a', replicas: 2, engine: 'sim' }],
    updatedAt: '2026-01-01T00:00:00Z',
    appliedAt: null,
    dropped: [],
    applied: false,
};
const plan = {
    preset: 'prod',
    strategy: 'balanced',
    nothingToDo: false,
    steps: [
        { action: 'load', model: 'a', podId: 'pod-a', gpuIds: [0], reason: 'would go to pod-a, GPU 0: 11.2 GB free after' },
        { action: 'load', model: 'a', podId: 'pod-b', gpuIds: [1], reason: 'would go to pod-b, GPU 1: 9.0 GB free after' },
    ],
    satisfied: [],
    replicas: { a: 0 },
};
function serve(handler) {
    const calls = [];
    vi.stubGlobal('fetch', vi.fn(async (path, init = {}) => {
        calls.push({ path, method: init.method ?? 'GET', body: init.body ? JSON.parse(init.body) : null });
        return handler(path, init) ?? json({ detail: 'Not Found', code: 'not_found' }, 404);
    }));
    return calls;
}
function show(path) {
    const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
    render(_jsx(QueryClientProvider, { client: qc, children: _jsx(MemoryRouter, { initialEntries: [path], children: _jsx(AuthProvider, { children: _jsx(PresetsPage, {}) }) }) }));
}
describe('PresetsPage', () => {
    it('shows the plan, applies with live step states and the outcome', async () => {
        const calls = serve((path, init) => {
            if (path === '/api/cluster/presets')
                return json([preset]);
            if (path === '/api/cluster/presets/prod/plan')
                return json(plan);
            if (path === '/api/cluster/presets/prod/apply' && init.method === 'POST') {
                return sse([
                    ['plan', plan],
                    ['step', { index: 0, ...plan.steps[0], state: 'running' }],
                    ['step', { index: 0, ...plan.steps[0], state: 'done', instanceId: 'i-1' }],
                    ['step', { index: 1, ...plan.steps[1], state: 'running' }],
                    ['step', { index: 1, ...plan.steps[1], state: 'failed', error: 'pod-b refused: no memory', code: 'model_does_not_fit' }],
                    ['done', { state: 'failed', failed: 1, steps: 2 }],
                ]);
            }
            return undefined;
        });
        show('/presets?preset=prod');
        const planCard = await screen.findByTestId('preset-plan');
        await waitFor(() => expect(within(planCard).getAllByTestId('preset-step')).toHaveLength(2));
        expect(within(planCard).getByTestId('plan-summary').textContent).toContain('2 loads');
        expect(planCard.textContent).toContain('Load a on pod pod-a, GPU 0');
        expect(planCard.textContent).toContain('11.2 GB free after');
        fireEvent.click(await screen.findByRole('button', { name: 'Apply' }));
        const progress = await screen.findByTestId('apply-progress');
        await waitFor(() => expect(progress.dataset.outcome).toBe('failed'));
        const states = within(progress)
            .getAllByTestId('preset-step')
            .map((r) => r.dataset.state);
        expect(states).toEqual(['done', 'failed']);
        expect(progress.textContent).toContain('model_does_not_fit: pod-b refused: no memory');
        expect(progress.textContent).toContain('2 steps, 1 failed');
        expect(calls.filter((c) => c.path.endsWith('/apply')).map((c) => c.method)).toEqual(['POST']);
    });
    it('shows a 409 preset_unschedulable with each pod’s reason', async () => {
        serve((path) => {
            if (path === '/api/cluster/presets')
                return json([preset]);
            if (path === '/api/cluster/presets/prod/plan')
                return json(plan);
            if (path === '/api/cluster/presets/prod/apply') {
                return json({
                    detail: "preset 'prod' cannot be applied: a: no pod can take this load",
                    code: 'preset_unschedulable',
                    steps: [{ action: 'unschedulable', model: 'a', reason: 'no pod can take this load', reasons: { 'pod-a': 'needs 107.4 GB per GPU' } }],
                }, 409);
            }
            return undefined;
        });
        show('/presets?preset=prod');
        fireEvent.click(await screen.findByRole('button', { name: 'Apply' }));
        const refused = await screen.findByTestId('apply-refused');
        expect(refused.dataset.code).toBe('preset_unschedulable');
        expect(refused.textContent).toContain('nothing was done');
        expect(refused.textContent).toContain('pod-a: needs 107.4 GB per GPU');
    });
    it('says so when another apply or reconcile pass is running', async () => {
        serve((path) => {
            if (path === '/api/cluster/presets')
                return json([{ ...preset, applied: true, appliedAt: '2026-01-01T00:00:00Z', reconcile: { lastRun: null, unschedulable: [] } }]);
            if (path === '/api/cluster/presets/prod/plan')
                return json({ ...plan, steps: [], nothingToDo: true });
            if (path === '/api/cluster/presets/prod/apply') {
                return json({ detail: 'another preset apply or reconcile pass is running; try again when it ends', code: 'preset_apply_in_progress' }, 409);
            }
            return undefined;
        });
        show('/presets?preset=prod');
        expect((await screen.findByTestId('plan-summary')).dataset.nothingToDo).toBe('true');
        expect(screen.getByTestId('reconcile-card')).toBeTruthy();
        fireEvent.click(screen.getByRole('button', { name: 'Apply' }));
        const refused = await screen.findByTestId('apply-refused');
        expect(refused.dataset.code).toBe('preset_apply_in_progress');
        expect(refused.textContent).toContain('Another apply or reconcile pass is running');
        expect(refused.textContent).toContain('apply again');
    });
    it('shows the server’s 422 at the field it names', async () => {
        const calls = serve((path, init) => {
            if (path === '/api/cluster/presets')
                return json([]);
            if (path === '/api/cluster/presets/new-one' && init.method === 'PUT') {
                return json({
                    detail: 'invalid request: models.0.modelPath: String should have at least 1 character',
                    code: 'validation_error',
                    errors: [{ field: 'models.0.modelPath', message: 'String should have at least 1 character' }],
                }, 422);
            }
            return undefined;
        });
        show('/presets');
        fireEvent.click(await screen.findByRole('button', { name: 'New preset' }));
        fireEvent.change(screen.getByLabelText(/^Name/), { target: { value: 'new-one' } });
        fireEvent.change(document.getElementById('preset-m0-servedModelName'), { target: { value: 'x' } });
        fireEvent.click(screen.getByRole('button', { name: 'Save' }));
        const model = await screen.findByTestId('preset-model-0');
        await waitFor(() => expect(model.textContent).toContain('String should have at least 1 character'));
        expect(document.getElementById('preset-m0-modelPath')?.getAttribute('aria-invalid')).toBe('true');
        const put = calls.find((c) => c.method === 'PUT');
        expect(put?.body).toMatchObject({ models: [{ modelPath: '', servedModelName: 'x', replicas: 1 }] });
    });
    it('edits as JSON: the server’s 422 for a field the form would not have is listed', async () => {
        const calls = serve((path, init) => {
            if (path === '/api/cluster/presets')
                return json([]);
            if (path === '/api/cluster/presets/j' && init.method === 'PUT') {
                return json({
                    detail: 'invalid request: models.0.replica: Extra inputs are not permitted',
                    code: 'validation_error',
                    errors: [{ field: 'models.0.replica', message: 'Extra inputs are not permitted' }],
                }, 422);
            }
            return undefined;
        });
        show('/presets');
        fireEvent.click(await screen.findByRole('button', { name: 'New preset' }));
        fireEvent.change(screen.getByLabelText(/^Name/), { target: { value: 'j' } });
        fireEvent.change(document.getElementById('preset-m0-modelPath'), { target: { value: 'org/m' } });
        fireEvent.click(screen.getByRole('button', { name: 'Edit as JSON' }));
        const area = document.getElementById('preset-json');
        expect(JSON.parse(area.value)).toMatchObject({ models: [{ modelPath: 'org/m', replicas: 1 }] });
        const typo = { models: [{ modelPath: 'org/m', servedModelName: 'm', replica: 2 }] };
        fireEvent.change(area, { target: { value: JSON.stringify(typo) } });
        fireEvent.click(screen.getByRole('button', { name: 'Save' }));
        expect((await screen.findByTestId('preset-json-errors')).textContent).toContain('models.0.replica: Extra inputs are not permitted');
        expect(calls.find((c) => c.method === 'PUT')?.body).toEqual(typo);
        // Back to the form: the entries as the form can show them.
        fireEvent.change(area, { target: { value: JSON.stringify({ models: [{ modelPath: 'org/m', servedModelName: 'm', replicas: 3 }] }) } });
        fireEvent.click(screen.getByRole('button', { name: 'Edit as form' }));
        expect(document.getElementById('preset-m0-replicas').value).toBe('3');
    });
});
