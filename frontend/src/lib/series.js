// Chart data shaping: polled samples -> aligned series for the time-series charts.
/** Keeps the points of the last `windowSeconds` (the newest point's clock). */
export function appendPoint(history, point, windowSeconds) {
    const cutoff = point.t - windowSeconds;
    return [...history.filter((p) => p.t >= cutoff && p.t < point.t), point];
}
/**
 * Aligns named values across points: one series per name (first seen first),
 * null where a point lacks that name (a model loaded later, or unloaded).
 */
function collect(points, entries) {
    const labels = [];
    const rows = points.map((p) => {
        const row = new Map(entries(p));
        for (const label of row.keys())
            if (!labels.includes(label))
                labels.push(label);
        return row;
    });
    return {
        xs: points.map((p) => p.t),
        series: labels.map((label) => ({ label, values: rows.map((row) => row.get(label) ?? null) })),
    };
}
const GIB = 2 ** 30;
export function gpuMemorySeries(points) {
    return collect(points, (p) => p.gpus.map((g) => [`GPU ${g.index} ${g.name}`, g.usedBytes / GIB]));
}
export function requestRateSeries(points) {
    return collect(points.filter((p) => p.models !== null), (p) => (p.models ?? []).map((m) => [m.model, m.requestsPerSecond]));
}
/** Latency quantiles in milliseconds: per model, p50 solid and p95 dashed in one colour. */
export function latencySeries(points) {
    const data = collect(points.filter((p) => p.models !== null), (p) => (p.models ?? []).flatMap((m) => [
        [`${m.model} p50`, m.p50 === null ? null : m.p50 * 1000],
        [`${m.model} p95`, m.p95 === null ? null : m.p95 * 1000],
    ]));
    return { ...data, series: data.series.map((s, i) => ({ ...s, colorIndex: i >> 1, dashed: i % 2 === 1 })) };
}
/** One latency quantile per model, in milliseconds (p50 and p95 get their own panels). */
export function latencyQuantileSeries(points, q) {
    return collect(points.filter((p) => p.models !== null), (p) => (p.models ?? []).map((m) => [m.model, m[q] === null ? null : m[q] * 1000]));
}
const pad = (n) => String(n).padStart(2, '0');
/**
 * A time-axis tick in the browser's local time: HH:MM, with seconds when the visible
 * span is under five minutes (otherwise ticks would repeat the same minute).
 */
export function clockLabel(unixSeconds, spanSeconds) {
    const d = new Date(unixSeconds * 1000);
    const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
    return spanSeconds < 300 ? `${hm}:${pad(d.getSeconds())}` : hm;
}
