import { describe, expect, it } from 'vitest';
import { bucketDelta, histogramQuantile, modelCounters, parsePrometheus, ratesBetween } from './prometheus';
function scrape(requests, buckets, model = 'qwen') {
    const lines = [
        '# HELP sardeenz_proxy_requests_total Inference requests',
        '# TYPE sardeenz_proxy_requests_total counter',
        `sardeenz_proxy_requests_total{model="${model}",status="200"} ${requests}`,
        `sardeenz_proxy_requests_total{model="${model}",status="503"} 1.0`,
        `sardeenz_proxy_requests_in_flight{model="${model}"} 2.0`,
        ...buckets.map(([le, n]) => `sardeenz_proxy_request_duration_seconds_bucket{le="${le}",model="${model}"} ${n}`),
        `sardeenz_proxy_request_duration_seconds_count{model="${model}"} ${buckets[buckets.length - 1]?.[1] ?? 0}`,
        'process_cpu_seconds_total 12.5',
        'sardeenz_proxy_requests_total{model="_unknown",status="404"} 3.0',
    ];
    return lines.join('\n');
}
describe('parsePrometheus', () => {
    it('reads names, labels with escapes, and special values', () => {
        const samples = parsePrometheus('a{x="q\\"uote",y="new\\nline"} 1.5\nb 2\nc{le="+Inf"} +Inf\n# comment\n');
        expect(samples).toEqual([
            { name: 'a', labels: { x: 'q"uote', y: 'new\nline' }, value: 1.5 },
            { name: 'b', labels: {}, value: 2 },
            { name: 'c', labels: { le: '+Inf' }, value: Infinity },
        ]);
    });
});
describe('histogramQuantile', () => {
    const buckets = [
        [0.1, 0],
        [0.25, 50],
        [0.5, 90],
        [1, 100],
        [Infinity, 100],
    ];
    it('interpolates inside the bucket like Prometheus', () => {
        expect(histogramQuantile(0.5, buckets)).toBeCloseTo(0.25);
        expect(histogramQuantile(0.25, buckets)).toBeCloseTo(0.175);
        expect(histogramQuantile(0.95, buckets)).toBeCloseTo(0.75);
    });
    it('returns the last finite bound for the +Inf bucket, null when empty', () => {
        expect(histogramQuantile(0.99, [[1, 0], [Infinity, 10]])).toBe(1);
        expect(histogramQuantile(0.5, [[1, 0], [Infinity, 0]])).toBeNull();
        expect(histogramQuantile(0.5, [])).toBeNull();
    });
});
describe('rates between scrapes', () => {
    const first = modelCounters(parsePrometheus(scrape(10, [['0.1', 5], ['1.0', 10], ['+Inf', 10]])));
    const second = modelCounters(parsePrometheus(scrape(30, [['0.1', 5], ['1.0', 30], ['+Inf', 30]])));
    it('sums statuses per model and counts 5xx as errors', () => {
        const qwen = second.get('qwen');
        expect(qwen?.requests).toBe(31);
        expect(qwen?.errors).toBe(1);
        expect(qwen?.inFlight).toBe(2);
    });
    it('gives requests/s and interval quantiles, skipping the special labels', () => {
        const rates = ratesBetween(first, second, 5);
        expect(rates).toHaveLength(1);
        const [r] = rates;
        expect(r?.requestsPerSecond).toBe(4);
        // The 20 new requests all fell in (0.1, 1.0]: the median is halfway.
        expect(r?.p50).toBeCloseTo(0.55);
    });
    it('treats a counter that went down (server restart) as a reset', () => {
        const restarted = modelCounters(parsePrometheus(scrape(3, [['0.1', 3], ['1.0', 3], ['+Inf', 3]])));
        const [r] = ratesBetween(second, restarted, 1);
        expect(r?.requestsPerSecond).toBe(4);
        expect(bucketDelta([[1, 10]], [[1, 3]])).toEqual([[1, 3]]);
    });
    it('has no latency for an interval without requests', () => {
        const [r] = ratesBetween(second, second, 5);
        expect(r?.requestsPerSecond).toBe(0);
        expect(r?.p95).toBeNull();
    });
});
