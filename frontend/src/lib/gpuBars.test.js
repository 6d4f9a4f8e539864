import { describe, expect, it } from 'vitest';
import { gpuBars } from './gpuBars';
const GIB = 2 ** 30;
function instance(id, gpuIds, pid) {
    return {
        id,
        modelPath: id,
        servedModelName: `${id}-name`,
        displayName: id,
        engine: 'sim',
        status: 'active',
        port: 1,
        processId: pid,
        engineCorePid: null,
        gpuMemoryLimit: null,
        gpuIds,
        tensorParallelSize: 1,
        kvcachedEnabled: true,
        kvcachedIpcName: null,
        gpuMemoryUtilization: null,
        reservedBytesPerGpu: null,
        memoryBaselineByGpu: null,
        createdAt: '2026-01-01T00:00:00Z',
        startedAt: null,
        stoppedAt: null,
        errorMessage: null,
        memoryMetrics: null,
        sleepModeEnabled: false,
        sleepLevel: null,
        sleptAt: null,
        extraArgs: [],
        logFile: null,
        warnings: [],
        simulated: true,
    };
}
const gpu = {
    index: 0,
    name: 'NVIDIA L4',
    uuid: 'u',
    totalBytes: 24 * GIB,
    usedBytes: 10 * GIB,
    freeBytes: 14 * GIB,
    utilizationPercent: 0,
    computeCapability: [8, 9],
    processes: [
        { pid: 100, usedBytes: 4 * GIB, instanceId: null },
        { pid: 200, usedBytes: 1 * GIB, instanceId: 'b' },
        { pid: 999, usedBytes: 3 * GIB, instanceId: null },
    ],
    simulated: true,
};
const budget = {
    index: 0,
    name: 'NVIDIA L4',
    simulated: true,
    totalBytes: 24 * GIB,
    usedBytes: 10 * GIB,
    freeBytes: 14 * GIB,
    baselineBytes: 9 * GIB,
    otherBytes: 3 * GIB,
    kvCacheTotalBytes: 12 * GIB,
    instances: { a: 4 * GIB, b: 3 * GIB, c: 2 * GIB },
};
describe('gpuBars', () => {
    const [bar] = gpuBars([gpu], [budget], [instance('a', [0], 100), instance('b', [0], null), instance('c', [0], null), instance('d', [1], 5)]);
    it('splits used memory by instance (current use, else baseline), other, free', () => {
        expect(bar?.segments.map((s) => [s.key, s.bytes / GIB, s.kind])).toEqual([
            ['a', 4, 'instance'],
            ['b', 1, 'instance'], // asleep: holds less than its baseline now
            ['c', 2, 'instance'], // no process visible: its baseline stands in
            ['other', 3, 'other'],
            ['free', 14, 'free'],
        ]);
        expect(bar?.segments.find((s) => s.key === 'b')?.baselineBytes).toBe(3 * GIB);
        expect(bar?.kvCacheTotalBytes).toBe(12 * GIB);
    });
    it('gives fractions of the total that add up to at most 1', () => {
        const total = bar?.segments.reduce((sum, s) => sum + s.fraction, 0) ?? 0;
        expect(total).toBeCloseTo(24 / 24);
        expect(bar?.segments[0]?.fraction).toBeCloseTo(4 / 24);
    });
    it('works without a budget and for an empty GPU', () => {
        const [empty] = gpuBars([{ ...gpu, usedBytes: 0, freeBytes: 24 * GIB, processes: [] }], [], []);
        expect(empty?.segments.map((s) => s.kind)).toEqual(['free']);
        expect(empty?.kvCacheTotalBytes).toBeNull();
    });
});
