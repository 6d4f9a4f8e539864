import { describe, expect, it } from 'vitest';
import { asGpuInfo, orderedPods, podGpuSummary, remotePod } from './cluster';
import { staticCluster } from './clusterFixture';
describe('cluster helpers', () => {
    it('orders the leader first, then by id', () => {
        expect(orderedPods(staticCluster()).map((p) => p.id)).toEqual(['pod-a', 'pod-b', 'pod-c']);
    });
    it('knows when a load goes to another pod than the one answering', () => {
        const s = staticCluster(); // answered by pod-b
        expect(remotePod(s, '')).toBeUndefined();
        expect(remotePod(s, 'pod-b')).toBeUndefined();
        expect(remotePod(s, 'pod-a')?.id).toBe('pod-a');
        expect(remotePod(s, 'pod-zz')).toBeUndefined();
        expect(remotePod(undefined, 'pod-a')).toBeUndefined();
    });
    it("sums a pod's GPUs", () => {
        expect(podGpuSummary([])).toBe('no GPU');
        expect(podGpuSummary(staticCluster().pods[1].gpus)).toBe('2 GPUs: 2 GiB of 40 GiB used');
    });
    it('turns heartbeat GPU figures into the dialog’s GPU shape, capability unknown', () => {
        const g = asGpuInfo(staticCluster().pods[1].gpus[1]);
        expect(g).toMatchObject({ index: 1, name: 'Tesla T4', freeBytes: 14 * 2 ** 30, computeCapability: null, simulated: false });
    });
});
