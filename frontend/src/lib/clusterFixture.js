// A static-mode cluster status as the tests of the cluster components see it.
export function instanceOf(id, name, status = 'active') {
    return {
        id,
        modelPath: name,
        servedModelName: name,
        displayName: name,
        engine: 'sim',
        status,
        port: 20001,
        processId: 1,
        engineCorePid: null,
        gpuMemoryLimit: null,
        gpuIds: [0],
        tensorParallelSize: 1,
        kvcachedEnabled: false,
        kvcachedIpcName: null,
        gpuMemoryUtilization: null,
        reservedBytesPerGpu: null,
        memoryBaselineByGpu: null,
        createdAt: '2026-01-01T00:00:00Z',
        startedAt: '2026-01-01T00:00:01Z',
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
const GIB = 2 ** 30;
export function staticCluster() {
    return {
        mode: 'static',
        podId: 'pod-b',
        leader: 'pod-a',
        term: 3,
        quorum: 2,
        size: 3,
        pods: [
            {
                id: 'pod-b',
                address: '127.0.0.2:3000',
                state: 'healthy',
                isLeader: false,
                self: true,
                gpus: [{ index: 0, name: 'NVIDIA L4', totalBytes: 24 * GIB, usedBytes: 6 * GIB, freeBytes: 18 * GIB, simulated: true }],
                instances: [instanceOf('i-b1', 'llama-b'), instanceOf('i-b2', 'qwen-b', 'sleeping')],
            },
            {
                id: 'pod-a',
                address: '127.0.0.1:3000',
                state: 'healthy',
                isLeader: true,
                self: false,
                lastSeenSecondsAgo: 0.4,
                gpus: [
                    { index: 0, name: 'NVIDIA L4', totalBytes: 24 * GIB, usedBytes: 0, freeBytes: 24 * GIB },
                    { index: 1, name: 'Tesla T4', totalBytes: 16 * GIB, usedBytes: 2 * GIB, freeBytes: 14 * GIB },
                ],
                instances: [],
            },
            {
                id: 'pod-c',
                address: '127.0.0.3:3000',
                state: 'unavailable',
                isLeader: false,
                self: false,
                lastSeenSecondsAgo: 31.2,
                gpus: [],
                instances: [instanceOf('i-c1', 'stale-c')],
            },
        ],
    };
}
