import { describe, expect, it } from 'vitest';
import { moveElapsed, moveFinished, movePollInterval, moveRoute, moveTimeline } from './moves';
const move = {
    id: 'mv-1',
    instanceId: 'i-1',
    model: 'qwen',
    sourcePodId: 'pod-a',
    sourceGpuIds: [0],
    targetPodId: 'pod-b',
    targetGpuIds: null,
    state: 'draining',
    steps: [
        { name: 'target-loading', at: '2026-01-01T00:00:00.500Z', detail: 'on pod-b' },
        { name: 'target-active', at: '2026-01-01T00:00:03.000Z' },
        { name: 'target-routed', at: '2026-01-01T00:00:04.250Z' },
    ],
    createdAt: '2026-01-01T00:00:00.000Z',
};
describe('move polling', () => {
    it('asks every second until the move is done or failed, then stops', () => {
        for (const state of ['pending', 'starting-target', 'switching', 'draining', 'unloading-source']) {
            expect(movePollInterval({ state })).toBe(1000);
            expect(moveFinished({ state })).toBe(false);
        }
        expect(movePollInterval(undefined)).toBe(1000); // not fetched yet
        expect(movePollInterval({ state: 'done' })).toBe(false);
        expect(movePollInterval({ state: 'failed' })).toBe(false);
    });
});
describe('moveTimeline', () => {
    it('gives each step its time since the start and since the step before', () => {
        expect(moveTimeline(move).map((s) => [s.name, s.offsetSeconds, s.tookSeconds, s.detail])).toEqual([
            ['target-loading', 0.5, 0.5, 'on pod-b'],
            ['target-active', 3, 2.5, ''],
            ['target-routed', 4.25, 1.25, ''],
        ]);
    });
    it('counts a running move up to now, a finished one by the server’s figure', () => {
        const now = Date.parse('2026-01-01T00:00:10.000Z');
        expect(moveElapsed(move, now)).toBe(10);
        expect(moveElapsed({ ...move, durationSeconds: 7.5, finishedAt: '2026-01-01T00:00:07.500Z' }, now)).toBe(7.5);
        expect(moveElapsed({ ...move, finishedAt: '2026-01-01T00:00:06.000Z' }, now)).toBe(6);
    });
    it('says where from and where to', () => {
        expect(moveRoute(move)).toBe('pod-a GPU 0 → pod-b GPU auto');
        expect(moveRoute({ ...move, targetPodId: 'pod-a', targetGpuIds: [1], sourceGpuIds: [] })).toBe('pod-a CPU → pod-a GPU 1');
    });
});
