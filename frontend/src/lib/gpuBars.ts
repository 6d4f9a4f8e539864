// One GPU's memory as a stacked bar: our instances, other processes, free.

import type { GpuBudget, GpuInfo, ModelInstance } from '../api/types';

export interface BarSegment {
  key: string;
  label: string;
  bytes: number;
  /** Share of the GPU's total, 0..1. */
  fraction: number;
  kind: 'instance' | 'other' | 'free';
  instanceId?: string;
  /** The instance's baseline (idle footprint measured when it turned active), if known. */
  baselineBytes?: number;
}

export interface GpuBar {
  index: number;
  name: string;
  simulated: boolean;
  totalBytes: number;
  usedBytes: number;
  freeBytes: number;
  kvCacheTotalBytes: number | null;
  segments: BarSegment[];
}

/** What the instance's processes hold on ``gpu`` now (0 when none is visible there). */
export function instanceBytes(gpu: GpuInfo, inst: ModelInstance): number {
  const pids = new Set([inst.processId, inst.engineCorePid].filter((p): p is number => p != null));
  return gpu.processes
    .filter((p) => p.instanceId === inst.id || (p.pid != null && pids.has(p.pid)))
    .reduce((sum, p) => sum + p.usedBytes, 0);
}

/**
 * The bar of each GPU. An instance's segment is what its processes hold now
 * (a sleeping instance shrinks); where no process is visible, its baseline from
 * the budget stands in (another pod's GPU, with no budget: its reservation). "Other" is the rest of the used memory; free is what
 * the driver reports free.
 */
export function gpuBars(
  gpus: GpuInfo[],
  budgets: GpuBudget[],
  instances: ModelInstance[],
): GpuBar[] {
  return gpus.map((gpu) => {
    const budget = budgets.find((b) => b.index === gpu.index);
    const total = gpu.totalBytes > 0 ? gpu.totalBytes : 1;
    const segments: BarSegment[] = [];
    let ours = 0;
    for (const inst of instances) {
      if (!inst.gpuIds.includes(gpu.index)) continue;
      // Another pod's GPU has no budget here (its heartbeat carries none): the
      // instance's reservation stands in for what it holds.
      const baseline = budget ? budget.instances[inst.id] : (inst.reservedBytesPerGpu ?? undefined);
      const now = instanceBytes(gpu, inst);
      const bytes = now > 0 ? now : (baseline ?? 0);
      if (bytes <= 0) continue;
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
