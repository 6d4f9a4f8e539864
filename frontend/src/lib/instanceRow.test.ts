import { describe, expect, it } from 'vitest';
import type { GpuInfo, ModelInstance } from '../api/types';
import { failureReason, gpuMemoryBytes, heldMemoryText, startingSeconds, startingText } from './instanceRow';

const inst = (over: Partial<ModelInstance>): ModelInstance =>
  ({
    id: 'i',
    status: 'active',
    createdAt: '2026-01-01T00:00:00Z',
    errorMessage: null,
    gpuIds: [0, 1],
    reservedBytesPerGpu: 2 * 2 ** 30,
    ...over,
  }) as ModelInstance;

describe('instance rows', () => {
  it('a failed row says why, first line only, clipped', () => {
    expect(failureReason(inst({ status: 'failed', errorMessage: '\nCUDA out of memory\ntraceback…' }))).toBe('CUDA out of memory');
    expect(failureReason(inst({ status: 'failed', errorMessage: 'x'.repeat(300) }), 10)).toBe(`${'x'.repeat(9)}…`);
    expect(failureReason(inst({ status: 'failed' }))).toMatch(/see its log/);
    expect(failureReason(inst({ status: 'active', errorMessage: 'old' }))).toBeNull();
  });

  it('starting rows count seconds since creation', () => {
    const now = Date.parse('2026-01-01T00:00:42Z');
    expect(startingSeconds(inst({ status: 'starting' }), now)).toBe(42);
    expect(startingSeconds(inst({ status: 'active' }), now)).toBeNull();
  });

  it('GPU memory is the reservation times the GPUs', () => {
    expect(gpuMemoryBytes(inst({}))).toBe(4 * 2 ** 30);
    expect(gpuMemoryBytes(inst({ gpuIds: [] }))).toBeNull();
    expect(gpuMemoryBytes(inst({ reservedBytesPerGpu: null }))).toBeNull();
  });
});

describe('held GPU memory, as the GPU bars read it', () => {
  const MiB = 2 ** 20;
  const gpu = (index: number, used: number): GpuInfo =>
    ({ index, processes: [{ pid: 7, usedBytes: used, instanceId: 'i' }] }) as unknown as GpuInfo;
  it('a sleeping instance: what its processes hold, with the baseline', () => {
    const sleeping = inst({ status: 'sleeping' });
    expect(heldMemoryText(sleeping, [gpu(0, 100 * MiB), gpu(1, 23 * MiB)])).toBe('123 MiB (baseline 4 GiB)');
  });
  it('a failed one holds nothing; with no report, the reservation stands in', () => {
    expect(heldMemoryText(inst({ status: 'failed' }), [gpu(0, 100 * MiB)])).toBe('none');
    expect(heldMemoryText(inst({}))).toBe('4 GiB');
  });
});

describe('starting rows', () => {
  const now = Date.parse('2026-01-01T00:00:12.700Z');
  it('say the phase and the whole seconds', () => {
    expect(startingText(inst({ status: 'starting', loadPhase: 'loading weights' }), now)).toBe('loading weights · 12 s');
    expect(startingText(inst({ status: 'starting', loadPhase: 'KV cache' }), now + 90_000)).toBe('KV cache · 1m 42s');
  });
  it('say "loading" when the server gives no phase, nothing when not starting', () => {
    expect(startingText(inst({ status: 'starting' }), now)).toBe('loading · 12 s');
    expect(startingText(inst({ status: 'active', loadPhase: null }), now)).toBeNull();
  });
});
