import { describe, expect, it } from 'vitest';
import { appendPoint, clockLabel, gpuMemorySeries, latencyQuantileSeries, latencySeries, requestRateSeries } from './series';
const GIB = 2 ** 30;
const rates = (model, rps, p50) => ({
    model,
    requestsPerSecond: rps,
    errorsPerSecond: 0,
    inFlight: 0,
    p50,
    p95: p50 === null ? null : p50 * 2,
});
const point = (t, used, models) => ({
    t,
    gpus: [{ index: 0, name: 'L4', usedBytes: used * GIB, totalBytes: 24 * GIB }],
    models,
});
describe('appendPoint', () => {
    it('drops points older than the window and keeps time ascending', () => {
        let h = [];
        for (const t of [0, 5, 10, 15])
            h = appendPoint(h, point(t, 1, null), 10);
        expect(h.map((p) => p.t)).toEqual([5, 10, 15]);
    });
});
describe('series', () => {
    const points = [
        point(0, 1, null),
        point(5, 2, [rates('a', 1, 0.1)]),
        point(10, 3, [rates('a', 2, null), rates('b', 4, 0.2)]),
    ];
    it('GPU memory in GiB, one series per GPU', () => {
        expect(gpuMemorySeries(points)).toEqual({ xs: [0, 5, 10], series: [{ label: 'GPU 0 L4', values: [1, 2, 3] }] });
    });
    it('request rates align models that appear later (null before)', () => {
        expect(requestRateSeries(points)).toEqual({
            xs: [5, 10],
            series: [
                { label: 'a', values: [1, 2] },
                { label: 'b', values: [null, 4] },
            ],
        });
    });
    it('latency in ms, p50 and p95 per model', () => {
        const lat = latencySeries(points);
        expect(lat.series.map((s) => s.label)).toEqual(['a p50', 'a p95', 'b p50', 'b p95']);
        expect(lat.series[0]?.values[0]).toBeCloseTo(100);
        expect(lat.series[1]?.values).toEqual([200, null]);
        expect(lat.series.map((s) => [s.colorIndex, s.dashed])).toEqual([
            [0, false],
            [0, true],
            [1, false],
            [1, true],
        ]);
    });
});
describe('latency panels and time labels', () => {
    it('one series per model for the chosen quantile, in ms', () => {
        const points = [
            { t: 1, gpus: [], models: null },
            { t: 6, gpus: [], models: [{ model: 'a', requestsPerSecond: 1, errorsPerSecond: 0, inFlight: 0, p50: 0.1, p95: 0.4 }] },
        ];
        expect(latencyQuantileSeries(points, 'p95')).toEqual({ xs: [6], series: [{ label: 'a', values: [400] }] });
        expect(latencyQuantileSeries(points, 'p50').series[0]?.values).toEqual([100]);
    });
    it('clock labels carry seconds only on short spans', () => {
        const t = new Date(2026, 0, 1, 9, 5, 7).getTime() / 1000;
        expect(clockLabel(t, 120)).toBe('09:05:07');
        expect(clockLabel(t, 3600)).toBe('09:05');
    });
});
