// Latency distribution (CDF) of a benchmark scenario, from its recorded statistics.
//
// The server keeps each scenario's min, p50, p90, p95, p99 and max (not every request), so
// the curve joins those points: exact at them, linear in between. The SLA (on end-to-end
// latency, as goodput counts it) is drawn as a vertical line.
/** The CDF through a scenario's recorded quantiles, x ascending (ms), y in 0..1. */
export function quantileCdf(m, which) {
    const raw = [
        [m[`${which}Min`], 0],
        [m[`${which}P50`], 0.5],
        [m[`${which}P90`], 0.9],
        [m[`${which}P95`], 0.95],
        [m[`${which}P99`], 0.99],
        [m[`${which}Max`], 1],
    ];
    // Quantiles of a real sample never decrease; clamp anyway so a bad record draws a sane curve.
    const out = [];
    let x = -Infinity;
    for (const [ms, y] of raw) {
        if (!Number.isFinite(ms))
            continue;
        x = Math.max(x, ms);
        out.push([x, y]);
    }
    return out;
}
/** The interpolated share of requests at or under `ms` (0 before the curve, 1 after). */
export function fractionWithin(points, ms) {
    const first = points[0];
    const last = points[points.length - 1];
    if (!first || !last)
        return 0;
    if (ms < first[0])
        return 0;
    if (ms >= last[0])
        return 1;
    for (let i = 1; i < points.length; i += 1) {
        const [x1, y1] = points[i];
        const [x0, y0] = points[i - 1];
        if (ms <= x1)
            return x1 === x0 ? y1 : y0 + ((y1 - y0) * (ms - x0)) / (x1 - x0);
    }
    return 1;
}
/** Round axis ticks from 0 to at least `max`: steps of 1, 2 or 5 times a power of ten. */
export function niceTicks(max, target = 5) {
    if (!(max > 0))
        return [0, 1];
    const rough = max / target;
    const power = 10 ** Math.floor(Math.log10(rough));
    const step = [1, 2, 5, 10].map((k) => k * power).find((s) => s >= rough) ?? 10 * power;
    const ticks = [];
    for (let v = 0; v < max + step; v += step) {
        ticks.push(Number(v.toPrecision(12)));
        if (v >= max)
            break;
    }
    return ticks;
}
