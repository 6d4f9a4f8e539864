// Benchmark results: every metric of the seed's BenchmarkMetrics, labelled, and run comparisons.
import { formatMs, formatNumber } from './format';
const STATS = ['Min', 'Avg', 'P50', 'P90', 'P95', 'P99', 'Max'];
const tokensPerSecond = (v) => (v === null ? '—' : `${formatNumber(v)} tok/s`);
function family(prefix, name, better, format) {
    return STATS.map((s) => ({ key: `${prefix}${s}`, label: `${name} ${s.toLowerCase()}`, better, format }));
}
/** Every metric, in display order. */
export const METRICS = [
    ...family('ttft', 'TTFT', 'lower', formatMs),
    ...family('e2e', 'E2E latency', 'lower', formatMs),
    ...family('tps', 'Decode rate', 'higher', tokensPerSecond),
    { key: 'goodputCount', label: 'Goodput (requests within SLA)', better: 'higher', format: (v) => formatNumber(v, 0), delta: 'count' },
    {
        key: 'goodputPercent',
        label: 'Goodput %',
        better: 'higher',
        format: (v) => (v === null ? '—' : `${formatNumber(v, 1)}%`),
        delta: 'points',
    },
    { key: 'requestsPerSecond', label: 'Requests/s', better: 'higher', format: (v) => formatNumber(v) },
    { key: 'tokensPerSecondTotal', label: 'Output tokens/s (total)', better: 'higher', format: tokensPerSecond },
];
export function metricValue(m, key) {
    return m ? m[key] : null;
}
export function scenarioTitle(s, i) {
    return `#${i + 1} ${s.modelName} · ${s.routingMode} · c${s.concurrency} · ${s.inputTokens}→${s.outputTokens} tok`;
}
/** How b compares with a on one metric (within 2% counts as the same). */
export function compareValue(a, b, better) {
    if (a === null || b === null)
        return { ratio: null, diff: null, verdict: 'n/a' };
    const diff = b - a;
    if (a === 0)
        return { ratio: null, diff, verdict: 'n/a' };
    const ratio = diff / Math.abs(a);
    if (Math.abs(ratio) < 0.02)
        return { ratio, diff, verdict: 'same' };
    const improved = better === 'lower' ? ratio < 0 : ratio > 0;
    return { ratio, diff, verdict: improved ? 'better' : 'worse' };
}
/** The text of a change: a relative gain only for ratio metrics, never for a count. */
export function deltaText(delta, kind = 'ratio') {
    const sign = (v) => (v > 0 ? '+' : v < 0 ? '−' : '±');
    if (kind === 'count')
        return delta.diff === null ? '—' : `${sign(delta.diff)}${formatNumber(Math.abs(delta.diff), 0)}`;
    if (kind === 'points')
        return delta.diff === null ? '—' : `${sign(delta.diff)}${formatNumber(Math.abs(delta.diff), 1)} pp`;
    return delta.ratio === null ? '—' : `${sign(delta.ratio)}${(Math.abs(delta.ratio) * 100).toFixed(1)}%`;
}
/**
 * What makes two scenarios comparable: the same model, routing and request shape. The
 * instance id is not part of it (a run repeated after a reload has a new instance).
 */
export function scenarioIdentity(s) {
    return [s.modelName, s.routingMode, `c${s.concurrency}`, `${s.inputTokens}→${s.outputTokens}`].join(' · ');
}
/**
 * Scenario pairs of two runs by identity (model, routing, concurrency, token shape), not by
 * position: reordering or adding a scenario must not compare unlike with unlike. The k-th
 * scenario of an identity in A pairs with the k-th of the same identity in B; a scenario
 * without a partner stays alone. Order: A's scenarios, then B's leftovers.
 */
export function pairScenarios(a, b) {
    const pool = new Map();
    for (const s of b.scenarios) {
        const id = scenarioIdentity(s);
        pool.set(id, [...(pool.get(id) ?? []), s]);
    }
    const seen = new Map();
    const title = (s) => {
        const id = scenarioIdentity(s);
        const n = (seen.get(id) ?? 0) + 1;
        seen.set(id, n);
        return n > 1 ? `${id} (${n})` : id;
    };
    const pairs = a.scenarios.map((sa) => {
        const sb = pool.get(scenarioIdentity(sa))?.shift() ?? null;
        return { title: title(sa), a: sa, b: sb };
    });
    for (const rest of pool.values())
        for (const sb of rest)
            pairs.push({ title: title(sb), a: null, b: sb });
    return pairs;
}
/** Bars for the latency chart: per scenario, p50/p95/p99 of TTFT and E2E in ms. */
export function latencyBars(run) {
    return run.scenarios
        .map((s, i) => ({ s, i }))
        .filter(({ s }) => s.metrics !== null)
        .map(({ s, i }) => {
        const m = s.metrics;
        return {
            label: scenarioTitle(s, i),
            values: [
                ['TTFT p50', m.ttftP50],
                ['TTFT p95', m.ttftP95],
                ['TTFT p99', m.ttftP99],
                ['E2E p50', m.e2eP50],
                ['E2E p95', m.e2eP95],
                ['E2E p99', m.e2eP99],
            ],
        };
    });
}
/** Share of a scenario's requests done, 0..100, from live progress or its final counts. */
export function scenarioPercent(s, progress) {
    if (s.status === 'completed')
        return 100;
    if (progress) {
        // Phases: prompts, warmup (not counted), then measure.
        if (progress.phase !== 'measure' || progress.total <= 0)
            return 0;
        return Math.min(100, (progress.completed / progress.total) * 100);
    }
    return s.totalRequests > 0 ? Math.min(100, ((s.successfulRequests + s.failedRequests) / s.totalRequests) * 100) : 0;
}
/**
 * A run with one progress event applied, counting as the API does: while a scenario
 * measures, its ok/failed counts are the live ones, and the run's totals are their sums
 * (warm-up requests are not counted). So the page's counters equal `GET /api/benchmarks/{id}`.
 */
export function applyProgress(run, p) {
    if (p.phase !== 'measure')
        return run;
    const scenarios = run.scenarios.map((s) => s.id === p.scenarioId && s.status === 'running' ? { ...s, successfulRequests: p.successful, failedRequests: p.failed } : s);
    return {
        ...run,
        scenarios,
        successfulRequests: scenarios.reduce((n, s) => n + s.successfulRequests, 0),
        failedRequests: scenarios.reduce((n, s) => n + s.failedRequests, 0),
    };
}
/** The scenario grid: one row per latency family, one column per statistic. */
export const GRID_STATS = STATS;
export const GRID_ROWS = [
    { prefix: 'ttft', label: 'TTFT', format: formatMs },
    { prefix: 'e2e', label: 'E2E latency', format: formatMs },
    { prefix: 'tps', label: 'Decode rate', format: tokensPerSecond },
];
export function gridValue(m, prefix, stat) {
    return m[`${prefix}${stat}`];
}
