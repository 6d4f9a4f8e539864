import { describe, expect, it } from 'vitest';
import { pointsFromSamples, type HistorySample } from './history';

const sample = (t: number, seconds: number, requests: number, p50: number | null): HistorySample => ({
  t,
  seconds,
  gpus: [{ pod: 'pod-a', index: 0, name: 'L4', usedBytes: t, totalBytes: 100 }],
  models: [
    { model: 'qwen', pod: null, requests, errors: 1, inFlight: 2, p50, p95: p50 === null ? null : p50 * 2 },
    { model: 'llama', pod: null, requests: 0, errors: 0, inFlight: 0, p50: null, p95: null },
  ],
});

describe('pointsFromSamples', () => {
  it("turns each interval's counts into rates and keeps each model's own quantiles", () => {
    const points = pointsFromSamples([sample(100, 0, 0, null), sample(105, 5, 10, 0.113)]);
    expect(points).toHaveLength(2);
    expect(points[0]?.models).toBeNull(); // no interval behind the first sample
    const m = points[1]?.models;
    expect(m?.map((r) => r.model)).toEqual(['llama', 'qwen']);
    expect(m?.[1]?.requestsPerSecond).toBe(2);
    expect(m?.[1]?.errorsPerSecond).toBe(0.2);
    expect(m?.[1]?.p50).toBe(0.113);
    expect(m?.[1]?.p95).toBe(0.226);
    expect(m?.[0]?.p50).toBeNull();
    expect(points[1]?.gpus[0]).toMatchObject({ pod: 'pod-a', usedBytes: 105 });
  });
});
