import { jsx as _jsx } from "react/jsx-runtime";
// @vitest-environment happy-dom
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { cleanup, fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { instanceOf, staticCluster } from '../lib/clusterFixture';
import { LoadModelModal } from './LoadModelModal';
import { defaultTarget, MoveModal } from './MoveModal';
afterEach(() => {
    cleanup();
    vi.unstubAllGlobals();
});
const json = (body, status = 200) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
function serve(handler) {
    const calls = [];
    vi.stubGlobal('fetch', vi.fn(async (path, init = {}) => {
        calls.push({ path, method: init.method ?? 'GET', body: init.body ? JSON.parse(init.body) : null });
        return handler(path, init) ?? json({ detail: 'Not Found', code: 'not_found' }, 404);
    }));
    return calls;
}
function withQueries(children) {
    const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
    return _jsx(QueryClientProvider, { client: qc, children: children });
}
describe('MoveModal', () => {
    it('offers another healthy pod first', () => {
        const status = staticCluster();
        expect(defaultTarget(status, 'pod-a')).not.toBe('pod-a');
        expect(status.pods.find((p) => p.id === defaultTarget(status, 'pod-a'))?.state).toBe('healthy');
    });
    it('posts the move, then polls it every second until done, showing each step', async () => {
        const base = {
            id: 'mv-1',
            instanceId: 'i-b1',
            model: 'llama-b',
            sourcePodId: 'pod-b',
            sourceGpuIds: [0],
            targetPodId: 'pod-a',
            targetGpuIds: [1],
            state: 'pending',
            steps: [],
            createdAt: '2026-01-01T00:00:00.000Z',
        };
        const answers = [
            { ...base, state: 'starting-target', steps: [{ name: 'target-loading', at: '2026-01-01T00:00:00.100Z' }] },
            {
                ...base,
                state: 'done',
                finishedAt: '2026-01-01T00:00:04.000Z',
                durationSeconds: 4,
                steps: [
                    { name: 'target-loading', at: '2026-01-01T00:00:00.100Z' },
                    { name: 'target-active', at: '2026-01-01T00:00:02.100Z' },
                    { name: 'drain-end', at: '2026-01-01T00:00:03.000Z', detail: '0 in flight, 0 cut' },
                    { name: 'source-gone', at: '2026-01-01T00:00:04.000Z' },
                ],
            },
        ];
        let polls = 0;
        const calls = serve((path, init) => {
            if (path === '/api/cluster/moves' && init.method === 'POST')
                return json(base, 202);
            if (path === '/api/cluster/moves/mv-1')
                return json(answers[Math.min(polls++, answers.length - 1)]);
            return undefined;
        });
        render(withQueries(_jsx(MoveModal, { inst: instanceOf('i-b1', 'llama-b'), podId: "pod-b", status: staticCluster(), onClose: () => undefined })));
        fireEvent.change(screen.getByLabelText('Target pod'), { target: { value: 'pod-a' } });
        fireEvent.click(screen.getByLabelText(/GPU 1 ·/));
        fireEvent.click(screen.getByRole('button', { name: 'Move' }));
        const steps = await screen.findByTestId('move-steps');
        await waitFor(() => expect(screen.getByTestId('move-steps').dataset.state).toBe('done'), { timeout: 4000 });
        const names = within(screen.getByTestId('move-steps'))
            .getAllByTestId('move-step')
            .map((r) => r.dataset.step);
        expect(names).toEqual(['target-loading', 'target-active', 'drain-end', 'source-gone']);
        expect(steps.textContent).toContain('0 in flight, 0 cut');
        expect(screen.getByTestId('move-steps').textContent).toContain('4 s in all');
        expect(calls.find((c) => c.method === 'POST')?.body).toEqual({ instanceId: 'i-b1', targetPodId: 'pod-a', gpuIds: [1] });
        const before = polls;
        await new Promise((r) => setTimeout(r, 1300));
        expect(polls).toBe(before); // done: no more polling
    }, 10_000);
    it('asks for GPUs when the target is the same pod, and shows a refusal', async () => {
        serve((path, init) => {
            if (path === '/api/cluster/moves' && init.method === 'POST') {
                return json({ detail: 'instance i-b1 is moving (mv-0)', code: 'instance_moving', moveId: 'mv-0' }, 409);
            }
            return undefined;
        });
        render(withQueries(_jsx(MoveModal, { inst: instanceOf('i-b1', 'llama-b'), podId: "pod-b", status: staticCluster(), onClose: () => undefined })));
        fireEvent.change(screen.getByLabelText('Target pod'), { target: { value: 'pod-b' } });
        expect(screen.getByText('The same pod: choose the GPUs to move to.')).toBeTruthy();
        expect(screen.getByRole('button', { name: 'Move' }).disabled).toBe(true);
        fireEvent.change(screen.getByLabelText('Target pod'), { target: { value: 'pod-a' } });
        fireEvent.click(screen.getByRole('button', { name: 'Move' }));
        expect((await screen.findByTestId('move-error')).textContent).toContain('is moving');
    });
});
describe('the load dialog’s scheduler verdict', () => {
    const gpus = { available: true, simulated: true, reason: null, gpus: [], budgets: [] };
    const health = { status: 'ok', version: 'x', mode: 'real', instances: {} };
    it('asks the scheduler for "Any" (debounced) and shows where it would go, or why nowhere', async () => {
        let placed = true;
        const calls = serve((path) => {
            if (path === '/api/cluster/status')
                return json(staticCluster());
            if (path === '/api/v1/gpus')
                return json(gpus);
            if (path === '/api/health')
                return json(health);
            if (path === '/api/cluster/schedule') {
                return json(placed
                    ? { strategy: 'balanced', placed: true, podId: 'pod-b', gpuIds: [1], verdict: 'would go to pod-b, GPU 1 (NVIDIA L4): 10.4 GiB free after', reasons: {} }
                    : {
                        strategy: 'balanced',
                        placed: false,
                        verdict: 'no pod can take this load',
                        reasons: { 'pod-c': 'needs 100.0 GiB per GPU', 'pod-a': 'suspect' },
                    });
            }
            return undefined;
        });
        render(withQueries(_jsx(LoadModelModal, { onClose: () => undefined })));
        await screen.findByLabelText('Pod');
        const path = screen.getByLabelText(/Model path/);
        fireEvent.change(path, { target: { value: 'o' } });
        fireEvent.change(path, { target: { value: 'org/model' } });
        const verdict = await screen.findByTestId('schedule-verdict', {}, { timeout: 2000 });
        expect(verdict.dataset.podId).toBe('pod-b');
        expect(verdict.textContent).toContain('would go to pod-b, GPU 1 (NVIDIA L4): 10.4 GiB free after');
        const asked = calls.filter((c) => c.path === '/api/cluster/schedule');
        expect(asked.map((c) => c.body.modelPath)).toEqual(['org/model']); // debounced
        expect(asked[0]?.body).not.toHaveProperty('podId');
        placed = false;
        fireEvent.change(path, { target: { value: 'org/huge' } });
        await waitFor(() => expect(screen.getByTestId('schedule-verdict').dataset.placed).toBe('false'), { timeout: 2000 });
        const refused = screen.getByTestId('schedule-verdict');
        expect(refused.textContent).toContain('pod-a: suspect');
        expect(refused.textContent).toContain('pod-c: needs 100.0 GiB per GPU');
        // A chosen pod: no scheduler question (the leader sends it there).
        fireEvent.change(screen.getByLabelText('Pod'), { target: { value: 'pod-c' } });
        await waitFor(() => expect(screen.queryByTestId('schedule-verdict')).toBeNull());
    });
});
