// One GPU's memory as a stacked bar: our instances, other processes, free.
function instanceBytes(gpu, inst) {
    const pids = new Set([inst.processId, inst.engineCorePid].filter((p) => p != null));
    return gpu.processes
        .filter((p) => p.instanceId === inst.id || (p.pid != null && pids.has(p.pid)))
        .reduce((sum, p) => sum + p.usedBytes, 0);
}
/**
 * The bar of each GPU. An instance's segment is what its processes hold now
 * (a sleeping instance shrinks); where no process is visible, its baseline from
 * the budget stands in. "Other" is the rest of the used memory; free is what
 * the driver reports free.
 */
export function gpuBars(gpus, budgets, instances) {
    return gpus.map((gpu) => {
        const budget = budgets.find((b) => b.index === gpu.index);
        const total = gpu.totalBytes > 0 ? gpu.totalBytes : 1;
        const segments = [];
        let ours = 0;
        for (const inst of instances) {
            if (!inst.gpuIds.includes(gpu.index))
                continue;
            const baseline = budget?.instances[inst.id];
            const now = instanceBytes(gpu, inst);
            const bytes = now > 0 ? now : (baseline ?? 0);
            if (bytes <= 0)
                continue;
            ours += bytes;
            segments.push({
                key: inst.id,
                label: inst.servedModelName,
                bytes,
                fraction: bytes / total,
                kind: 'instance',
                instanceId: inst.id,
                ...(baseline !== undefined ? { baselineBytes: baseline } : {}),
            });
        }
        const other = Math.max(0, gpu.usedBytes - ours);
        if (other > 0) {
            segments.push({ key: 'other', label: 'Other processes', bytes: other, fraction: other / total, kind: 'other' });
        }
        segments.push({
            key: 'free',
            label: 'Free',
            bytes: gpu.freeBytes,
            fraction: gpu.freeBytes / total,
            kind: 'free',
        });
        return {
            index: gpu.index,
            name: gpu.name,
            simulated: gpu.simulated,
            totalBytes: gpu.totalBytes,
            usedBytes: gpu.usedBytes,
            freeBytes: gpu.freeBytes,
            kvCacheTotalBytes: budget?.kvCacheTotalBytes ?? null,
            segments,
        };
    });
}
