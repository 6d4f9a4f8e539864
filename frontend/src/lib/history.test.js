import { describe, expect, it } from 'vitest';
import { pointsFromSamples } from './history';
const BOUNDS = [0.1, 1];
const sample = (t, requests, duration) => ({
    t,
    gpus: [{ index: 0, name: 'L4', usedBytes: t, totalBytes: 100 }],
    models: [
        { model: 'qwen', requests, errors: 0, inFlight: 1, duration },
        { model: '_unknown', requests: 3, errors: 0, inFlight: 0, duration: [0, 0, 3] },
    ],
});
describe('pointsFromSamples', () => {
    it('turns consecutive raw counters into rates and interval quantiles', () => {
        const points = pointsFromSamples([sample(100, 10, [10, 10, 10]), sample(105, 20, [10, 20, 20])], BOUNDS, null);
        expect(points).toHaveLength(2);
        expect(points[0]?.models).toBeNull(); // a rate needs two samples
        const m = points[1]?.models;
        expect(m?.map((r) => r.model)).toEqual(['qwen']); // the special labels are not models
        expect(m?.[0]?.requestsPerSecond).toBe(2);
        // All 10 requests of the interval took 0.1..1 s: p50 interpolates to the middle.
        expect(m?.[0]?.p50).toBeCloseTo(0.55);
        expect(points[1]?.gpus[0]?.usedBytes).toBe(105);
    });
    it('continues from the sample before an incremental fetch, and survives a counter reset', () => {
        const before = sample(100, 50, [50, 50, 50]);
        const points = pointsFromSamples([sample(110, 5, [5, 5, 5])], BOUNDS, before);
        expect(points[0]?.models?.[0]?.requestsPerSecond).toBe(0.5); // reset: counted from zero
        expect(points[0]?.models?.[0]?.p95).toBeCloseTo(0.095);
    });
});
