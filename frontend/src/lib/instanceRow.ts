// What a row of the instances table says beyond the raw fields: why it failed, how far and
// how long it has been starting, how much GPU memory it holds.

import type { GpuBudget, GpuInfo, ModelInstance } from '../api/types';
import { formatBytes, formatDuration } from './format';
import { instanceBytes } from './gpuBars';

/** The first line of a failed instance's error, clipped for a table cell (full text in a tooltip). */
export function failureReason(inst: ModelInstance, max = 160): string | null {
  if (inst.status !== 'failed') return null;
  const text = (inst.errorMessage ?? '').trim();
  if (!text) return 'failed without a reason: see its log';
  const first = text.split('\n').find((l) => l.trim() !== '')?.trim() ?? text;
  return first.length > max ? `${first.slice(0, max - 1)}…` : first;
}

/** Seconds since a starting instance was created; null for any other status. */
export function startingSeconds(inst: ModelInstance, now: number): number | null {
  if (inst.status !== 'starting') return null;
  const created = Date.parse(inst.createdAt);
  return Number.isFinite(created) ? Math.max(0, (now - created) / 1000) : null;
}

/** A starting row's phase and elapsed time, "loading weights · 12 s"; null for any other
 *  status. An instance from a server without phases says "loading". */
export function startingText(inst: ModelInstance, now: number): string | null {
  const seconds = startingSeconds(inst, now);
  if (inst.status !== 'starting') return null;
  const phase = inst.loadPhase ?? 'loading';
  if (seconds === null) return phase;
  const whole = Math.floor(seconds);
  return `${phase} · ${whole < 60 ? `${whole} s` : formatDuration(whole)}`;
}

/** GPU memory the instance holds: its reservation on each of its GPUs; null when unknown. */
export function gpuMemoryBytes(inst: ModelInstance): number | null {
  if (inst.reservedBytesPerGpu == null || inst.gpuIds.length === 0) return null;
  return inst.reservedBytesPerGpu * inst.gpuIds.length;
}

/**
 * What the instance holds on its GPUs now, read as the GPU bars read it (lib/gpuBars.ts):
 * its processes' memory where the GPU report shows them, else its baseline (or its
 * reservation). A sleeping instance adds its baseline, so "123 MiB (baseline 4 GiB)" reads
 * the same in a table and on a bar; a failed one holds nothing.
 */
export function heldMemoryText(inst: ModelInstance, gpus: GpuInfo[] = [], budgets: GpuBudget[] = []): string {
  if (inst.status === 'failed') return 'none';
  let now = 0;
  let baseline = 0;
  let known = false;
  for (const index of inst.gpuIds) {
    const gpu = gpus.find((g) => g.index === index);
    if (gpu) now += instanceBytes(gpu, inst);
    const base = budgets.find((b) => b.index === index)?.instances[inst.id] ?? inst.reservedBytesPerGpu;
    if (base != null) {
      baseline += base;
      known = true;
    }
  }
  if (now <= 0) return known ? formatBytes(baseline) : formatBytes(gpuMemoryBytes(inst));
  return inst.status === 'sleeping' && known ? `${formatBytes(now)} (baseline ${formatBytes(baseline)})` : formatBytes(now);
}
