import { jsx as _jsx } from "react/jsx-runtime";
// @vitest-environment happy-dom
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { cleanup, fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { keys } from '../api/queries';
import { LoadModelModal } from '../components/LoadModelModal';
import { instanceOf, staticCluster } from '../lib/clusterFixture';
import ClusterPage from './ClusterPage';
afterEach(() => {
    cleanup();
    vi.unstubAllGlobals();
});
const json = (body, status = 200) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
/** A fake server: GET answers by path, POSTs are recorded. */
function serve(routes) {
    const calls = [];
    vi.stubGlobal('fetch', vi.fn(async (path, init = {}) => {
        const method = init.method ?? 'GET';
        calls.push({ path, method, body: init.body ? JSON.parse(init.body) : null });
        if (method === 'POST' && path === '/api/v1/models/load') {
            const req = JSON.parse(init.body);
            return json({ ...instanceOf('i-new', req.modelPath, 'starting'), podId: req.podId ?? null }, 202);
        }
        return path in routes ? json(routes[path]) : json({ detail: 'Not Found', code: 'not_found' }, 404);
    }));
    return calls;
}
let qc;
function withQueries(children) {
    qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
    return _jsx(QueryClientProvider, { client: qc, children: children });
}
const single = {
    mode: 'single',
    podId: 'host-3000',
    leader: 'host-3000',
    term: 0,
    pods: [{ id: 'host-3000', address: '127.0.0.1:3000', state: 'healthy', isLeader: true, self: true, gpus: [], instances: [] }],
};
describe('ClusterPage', () => {
    it('on a single node, says so and how to form a cluster', async () => {
        serve({ '/api/cluster/status': single });
        render(withQueries(_jsx(ClusterPage, {})));
        const card = await screen.findByTestId('cluster-single');
        expect(card.textContent).toContain('This node (host-3000) runs alone');
        expect(card.textContent).toContain('CLUSTER_PEERS=');
        expect(card.textContent).toContain('CLUSTER_SECRET=');
        expect(screen.queryByTestId('cluster-leader')).toBeNull();
    });
    it('in a cluster, shows the overview and one pane per pod, the leader first', async () => {
        serve({ '/api/cluster/status': staticCluster() });
        render(withQueries(_jsx(ClusterPage, {})));
        expect((await screen.findByTestId('cluster-leader')).textContent).toBe('pod-a');
        const panes = screen.getAllByTestId(/^node-pane-/).map((p) => p.dataset.testid);
        expect(panes).toEqual(['node-pane-pod-a', 'node-pane-pod-b', 'node-pane-pod-c']);
        expect(within(screen.getByTestId('node-pane-pod-b')).getByText('qwen-b')).toBeTruthy();
    });
});
describe('LoadModelModal in a cluster', () => {
    const gpus = { available: true, simulated: true, reason: null, gpus: [], budgets: [] };
    const health = { status: 'ok', version: 'x', mode: 'real', instances: {} };
    it('sends the chosen pod as podId and shows that pod’s GPUs', async () => {
        const calls = serve({ '/api/cluster/status': { ...staticCluster(), podId: 'pod-c' }, '/api/v1/gpus': gpus, '/api/health': health });
        const onClose = vi.fn();
        render(withQueries(_jsx(LoadModelModal, { onClose: onClose })));
        const pod = (await screen.findByLabelText('Pod'));
        expect(pod.value).toBe('');
        fireEvent.change(pod, { target: { value: 'pod-a' } });
        // pod-a's GPUs (from its heartbeat), not this pod's (none)
        expect(await screen.findByLabelText(/GPU 1 · Tesla T4/)).toBeTruthy();
        fireEvent.change(screen.getByLabelText(/Model path/), { target: { value: 'org/model' } });
        fireEvent.click(screen.getByRole('button', { name: 'Load' }));
        await waitFor(() => expect(onClose).toHaveBeenCalled());
        const load = calls.find((c) => c.method === 'POST');
        expect(load?.body).toMatchObject({ modelPath: 'org/model', podId: 'pod-a' });
    });
    it('sends no podId for "any", and shows no pod choice on a single node', async () => {
        const calls = serve({ '/api/cluster/status': single, '/api/v1/gpus': gpus, '/api/health': health });
        const onClose = vi.fn();
        render(withQueries(_jsx(LoadModelModal, { onClose: onClose })));
        await waitFor(() => expect(qc.getQueryState(keys.cluster)?.status).toBe('success'));
        fireEvent.change(screen.getByLabelText(/Model path/), { target: { value: 'org/model' } });
        expect(screen.queryByLabelText('Pod')).toBeNull();
        fireEvent.click(screen.getByRole('button', { name: 'Load' }));
        await waitFor(() => expect(onClose).toHaveBeenCalled());
        const load = calls.find((c) => c.method === 'POST');
        expect(load?.body).not.toHaveProperty('podId');
    });
});
