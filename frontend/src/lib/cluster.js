// Pure helpers of the Cluster page and the load dialog's pod choice.
import { formatBytes } from './format';
export const POD_STATE_COLOR = {
    healthy: 'green',
    suspect: 'orange',
    unavailable: 'red',
};
/** "12.0 GiB of 24.0 GiB used" over every GPU of a pod; "no GPU" for a CPU-only pod. */
export function podGpuSummary(gpus) {
    if (gpus.length === 0)
        return 'no GPU';
    const used = gpus.reduce((s, g) => s + g.usedBytes, 0);
    const total = gpus.reduce((s, g) => s + g.totalBytes, 0);
    return `${gpus.length} GPU${gpus.length > 1 ? 's' : ''}: ${formatBytes(used)} of ${formatBytes(total)} used`;
}
/** Pods in the order to show them: the leader first, then by id. */
export function orderedPods(status) {
    return [...status.pods].sort((a, b) => Number(b.isLeader) - Number(a.isLeader) || a.id.localeCompare(b.id));
}
/** The pod a load with `podId` runs on when it is another pod than the one answering
 *  (its GPUs are then not this pod's); undefined for "any" or this pod. */
export function remotePod(status, podId) {
    if (!status || !podId)
        return undefined;
    const pod = status.pods.find((p) => p.id === podId);
    return pod && !pod.self && pod.id !== status.podId ? pod : undefined;
}
/** A pod's heartbeat GPU figures in the shape of the load dialog's GPU list (what a
 *  heartbeat does not carry, like compute capability, is unknown). */
export function asGpuInfo(g) {
    return {
        index: g.index,
        name: g.name,
        uuid: '',
        totalBytes: g.totalBytes,
        usedBytes: g.usedBytes,
        freeBytes: g.freeBytes,
        utilizationPercent: null,
        computeCapability: null,
        processes: [],
        simulated: g.simulated ?? false,
    };
}
