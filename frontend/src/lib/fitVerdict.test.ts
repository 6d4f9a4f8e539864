import { describe, expect, it } from 'vitest';
import type { FitVerdict } from '../api/types';
import { describeVerdict } from './fitVerdict';

const GB = 1e9;

function verdict(over: Partial<FitVerdict>): FitVerdict {
  return {
    modelPath: '/models/qwen',
    fits: true,
    source: 'estimate',
    reason: 'fits (estimate): needs 5 GB',
    profileId: null,
    profileName: null,
    maxTokens: 4096,
    tensorParallelSize: 1,
    neededBytesPerGpu: 5 * GB,
    reservedBytesPerGpu: 2 * GB,
    chosenGpuIds: [0],
    gpus: [
      { index: 0, name: 'NVIDIA L4', totalBytes: 24 * GB, freeBytes: 20 * GB, reservedBytes: 2 * GB, availableBytes: 18 * GB, neededBytes: 5 * GB, fits: true },
      { index: 1, name: 'Tesla T4', totalBytes: 16 * GB, freeBytes: 4 * GB, reservedBytes: 2 * GB, availableBytes: 2 * GB, neededBytes: 5 * GB, fits: false },
    ],
    notes: ['estimate from config.json'],
    ...over,
  };
}

describe('describeVerdict', () => {
  it('a fit is a success, saying where the figures come from', () => {
    const view = describeVerdict(verdict({}));
    expect(view.variant).toBe('success');
    expect(view.title).toBe('Fits (estimated from the model files)');
    expect(view.details[0]).toBe('fits (estimate): needs 5 GB');
    expect(view.details).toContain('GPU 0 (NVIDIA L4): needs 4.7 GiB, 16.8 GiB available after the 1.9 GiB reserve');
    expect(view.details).toContain('GPU 1 (Tesla T4): needs 4.7 GiB, 1.9 GiB available after the 1.9 GiB reserve — too little');
    expect(view.details[view.details.length - 1]).toBe('estimate from config.json');
  });

  it('a misfit is danger; a profile is named', () => {
    const view = describeVerdict(verdict({ fits: false, source: 'profile', profileName: 'qwen@4k' }));
    expect(view.variant).toBe('danger');
    expect(view.title).toBe('Will not fit (from profile “qwen@4k”)');
  });

  it('unknown is information, not a refusal', () => {
    const view = describeVerdict(
      verdict({ fits: null, source: 'unknown', reason: 'not a local model directory', gpus: [{ index: 0, name: 'L4', totalBytes: 1, freeBytes: 1, reservedBytes: 0, availableBytes: 1, neededBytes: null, fits: null }], notes: [] }),
    );
    expect(view).toEqual({ variant: 'info', title: 'Fit unknown (nothing known about this model)', details: ['not a local model directory'] });
  });

  it('a misfit of a limit alone says so, in the GB the limit was typed in', () => {
    // Nothing known about the model, but 100 GB per GPU is more than any GPU has free.
    const gpus = verdict({}).gpus.map((g) => ({ ...g, neededBytes: 100 * GB, fits: false }));
    const view = describeVerdict(verdict({ fits: false, source: 'unknown', neededBytesPerGpu: 100 * GB, gpus }), 'GB');
    expect(view.title).toBe('Will not fit (for the memory limit asked for)');
    expect(view.title).not.toContain('nothing known');
    expect(view.details).toContain('GPU 0 (NVIDIA L4): needs 100 GB, 18 GB available after the 2 GB reserve — too little');
  });
});
