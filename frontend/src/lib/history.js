// The server's metrics history (GET /api/v1/metrics/history) -> chart points.
//
// The server keeps raw counters (see src/sardeenz/metrics_history.py); rates and
// quantiles between consecutive samples come from the same functions as a live scrape.
import { ratesBetween } from './prometheus';
export function countersOf(sample, bounds) {
    const out = new Map();
    for (const m of sample.models) {
        const duration = m.duration.map((count, i) => [bounds[i] ?? Infinity, count]);
        out.set(m.model, { model: m.model, requests: m.requests, errors: m.errors, inFlight: m.inFlight, duration });
    }
    return out;
}
/**
 * Chart points for `samples` (oldest first). `before` is the sample preceding them (from
 * an earlier fetch), so the first new point gets rates too; without it the first point
 * has none (a rate needs two samples).
 */
export function pointsFromSamples(samples, bounds, before) {
    let prev = before;
    return samples.map((s) => {
        const models = prev ? ratesBetween(countersOf(prev, bounds), countersOf(s, bounds), s.t - prev.t) : null;
        prev = s;
        return { t: s.t, gpus: s.gpus, models };
    });
}
