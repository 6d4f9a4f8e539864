import { describe, expect, it } from 'vitest';
import { fractionWithin, niceTicks, quantileCdf } from './cdf';
const m = {
    ttftMin: 10, ttftP50: 20, ttftP90: 40, ttftP95: 50, ttftP99: 90, ttftMax: 100,
    e2eMin: 100, e2eP50: 200, e2eP90: 180, e2eP95: 300, e2eP99: 400, e2eMax: 500,
};
describe('latency CDF', () => {
    it('passes through the recorded quantiles', () => {
        expect(quantileCdf(m, 'ttft')).toEqual([[10, 0], [20, 0.5], [40, 0.9], [50, 0.95], [90, 0.99], [100, 1]]);
    });
    it('never goes back in x, even for an inconsistent record', () => {
        const xs = quantileCdf(m, 'e2e').map(([x]) => x);
        expect(xs).toEqual([100, 200, 200, 300, 400, 500]);
    });
    it('interpolates the share within an SLA', () => {
        const ttft = quantileCdf(m, 'ttft');
        expect(fractionWithin(ttft, 5)).toBe(0);
        expect(fractionWithin(ttft, 15)).toBeCloseTo(0.25);
        expect(fractionWithin(ttft, 45)).toBeCloseTo(0.925);
        expect(fractionWithin(ttft, 1000)).toBe(1);
    });
    it('axis ticks are round and cover the maximum', () => {
        expect(niceTicks(480)).toEqual([0, 100, 200, 300, 400, 500]);
        expect(niceTicks(7)).toEqual([0, 2, 4, 6, 8]);
        expect(niceTicks(0)).toEqual([0, 1]);
    });
});
