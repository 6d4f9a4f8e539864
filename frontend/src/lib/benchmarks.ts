// Benchmark results: every metric of the seed's BenchmarkMetrics, labelled, and run comparisons.

import type { BenchmarkMetrics, BenchmarkRun, BenchmarkScenario } from '../api/types';
import { formatMs, formatNumber } from './format';

type MetricKey = Exclude<keyof BenchmarkMetrics, 'scenarioId'>;

export interface MetricDef {
  key: MetricKey;
  label: string;
  /** Whether a smaller value is better (latency) or a larger one (throughput). */
  better: 'lower' | 'higher';
  format: (v: number | null) => string;
  /**
   * How a change is shown: 'ratio' as a relative gain (latency, throughput), 'count' as a
   * signed difference (a count of requests depends on how many were sent, so a "+50%" of it
   * says nothing), 'points' as percentage points (the value already is a percentage).
   */
  delta?: 'ratio' | 'count' | 'points';
}

const STATS = ['Min', 'Avg', 'P50', 'P90', 'P95', 'P99', 'Max'] as const;
const tokensPerSecond = (v: number | null): string => (v === null ? '—' : `${formatNumber(v)} tok/s`);

function family(prefix: 'ttft' | 'tps' | 'e2e', name: string, better: MetricDef['better'], format: MetricDef['format']): MetricDef[] {
  return STATS.map((s) => ({ key: `${prefix}${s}` as MetricKey, label: `${name} ${s.toLowerCase()}`, better, format }));
}

/** Every metric, in display order. */
export const METRICS: MetricDef[] = [
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

export function metricValue(m: BenchmarkMetrics | null, key: MetricKey): number | null {
  return m ? m[key] : null;
}

export function scenarioTitle(s: BenchmarkScenario, i: number): string {
  return `#${i + 1} ${s.modelName} · ${s.routingMode} · c${s.concurrency} · ${s.inputTokens}→${s.outputTokens} tok`;
}

export interface Delta {
  /** b relative to a: (b - a) / a; null when either is missing, a is 0 or the metric is not a ratio. */
  ratio: number | null;
  /** b - a; null when either is missing. */
  diff: number | null;
  verdict: 'better' | 'worse' | 'same' | 'n/a';
}

/** How b compares with a on one metric (within 2% counts as the same). */
export function compareValue(a: number | null, b: number | null, better: MetricDef['better']): Delta {
  if (a === null || b === null) return { ratio: null, diff: null, verdict: 'n/a' };
  const diff = b - a;
  if (a === 0) return { ratio: null, diff, verdict: 'n/a' };
  const ratio = diff / Math.abs(a);
  if (Math.abs(ratio) < 0.02) return { ratio, diff, verdict: 'same' };
  const improved = better === 'lower' ? ratio < 0 : ratio > 0;
  return { ratio, diff, verdict: improved ? 'better' : 'worse' };
}

/** The text of a change: a relative gain only for ratio metrics, never for a count. */
export function deltaText(delta: Delta, kind: MetricDef['delta'] = 'ratio'): string {
  const sign = (v: number): string => (v > 0 ? '+' : v < 0 ? '−' : '±');
  if (kind === 'count') return delta.diff === null ? '—' : `${sign(delta.diff)}${formatNumber(Math.abs(delta.diff), 0)}`;
  if (kind === 'points') return delta.diff === null ? '—' : `${sign(delta.diff)}${formatNumber(Math.abs(delta.diff), 1)} pp`;
  return delta.ratio === null ? '—' : `${sign(delta.ratio)}${(Math.abs(delta.ratio) * 100).toFixed(1)}%`;
}

/**
 * What makes two scenarios comparable: the same model, routing and request shape. The
 * instance id is not part of it (a run repeated after a reload has a new instance).
 */
export function scenarioIdentity(s: BenchmarkScenario): string {
  return [s.modelName, s.routingMode, `c${s.concurrency}`, `${s.inputTokens}→${s.outputTokens}`].join(' · ');
}

export interface ComparedScenario {
  title: string;
  a: BenchmarkScenario | null;
  b: BenchmarkScenario | null;
  /** Set when the pair differs in concurrency (a sweep: c=4 in A against c=8 in B). */
  concurrency?: { a: number; b: number };
}

/** The same model, routing and token shape, whatever the concurrency: a sweep's points. */
function sweepIdentity(s: BenchmarkScenario): string {
  return [s.modelName, s.routingMode, `${s.inputTokens}→${s.outputTokens}`].join(' · ');
}

/**
 * Scenario pairs of two runs by identity (model, routing, concurrency, token shape), not by
 * position: reordering or adding a scenario must not compare unlike with unlike. The k-th
 * scenario of an identity in A pairs with the k-th of the same identity in B. What is left
 * then pairs with what differs only in concurrency (a concurrency sweep run twice, c=4 then
 * c=8: the same load at two levels, side by side), in order of concurrency; a scenario
 * without any partner stays alone. Order: A's scenarios, then B's leftovers.
 */
export function pairScenarios(a: BenchmarkRun, b: BenchmarkRun): ComparedScenario[] {
  const pool = new Map<string, BenchmarkScenario[]>();
  for (const s of b.scenarios) {
    const id = scenarioIdentity(s);
    pool.set(id, [...(pool.get(id) ?? []), s]);
  }
  const seen = new Map<string, number>();
  const unique = (id: string): string => {
    const n = (seen.get(id) ?? 0) + 1;
    seen.set(id, n);
    return n > 1 ? `${id} (${n})` : id;
  };
  const pairs: ComparedScenario[] = a.scenarios.map((sa) => {
    const sb = pool.get(scenarioIdentity(sa))?.shift() ?? null;
    return { title: '', a: sa, b: sb };
  });
  // Second pass: A's unpaired scenarios meet B's leftovers of the same sweep.
  const leftovers = new Map<string, BenchmarkScenario[]>();
  for (const s of [...pool.values()].flat().sort((x, y) => x.concurrency - y.concurrency)) {
    const id = sweepIdentity(s);
    leftovers.set(id, [...(leftovers.get(id) ?? []), s]);
  }
  const lonelyA = pairs.filter((p) => p.b === null).sort((x, y) => x.a!.concurrency - y.a!.concurrency);
  for (const pair of lonelyA) {
    const sb = leftovers.get(sweepIdentity(pair.a!))?.shift();
    if (sb) {
      pair.b = sb;
      pair.concurrency = { a: pair.a!.concurrency, b: sb.concurrency };
    }
  }
  for (const rest of leftovers.values()) for (const sb of rest) pairs.push({ title: '', a: null, b: sb });
  for (const pair of pairs) {
    const one = (pair.a ?? pair.b)!;
    pair.title = unique(
      pair.concurrency
        ? `${sweepIdentity(one)} · c${pair.concurrency.a} (A) vs c${pair.concurrency.b} (B)`
        : scenarioIdentity(one),
    );
  }
  return pairs;
}

/** Bars for the latency chart: per scenario, p50/p95/p99 of TTFT and E2E in ms. */
export function latencyBars(run: BenchmarkRun): Array<{ label: string; values: Array<[string, number]> }> {
  return run.scenarios
    .map((s, i) => ({ s, i }))
    .filter(({ s }) => s.metrics !== null)
    .map(({ s, i }) => {
      const m = s.metrics as BenchmarkMetrics;
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
export function scenarioPercent(s: BenchmarkScenario, progress?: { completed: number; total: number; phase: string }): number {
  if (s.status === 'completed') return 100;
  if (progress) {
    // Phases: prompts, warmup (not counted), then measure.
    if (progress.phase !== 'measure' || progress.total <= 0) return 0;
    return Math.min(100, (progress.completed / progress.total) * 100);
  }
  return s.totalRequests > 0 ? Math.min(100, ((s.successfulRequests + s.failedRequests) / s.totalRequests) * 100) : 0;
}

/**
 * A run with one progress event applied, counting as the API does: while a scenario
 * measures, its ok/failed counts are the live ones, and the run's totals are their sums
 * (warm-up requests are not counted). So the page's counters equal `GET /api/benchmarks/{id}`.
 */
export function applyProgress(
  run: BenchmarkRun,
  p: { scenarioId: string; phase: string; successful: number; failed: number },
): BenchmarkRun {
  if (p.phase !== 'measure') return run;
  const scenarios = run.scenarios.map((s) =>
    s.id === p.scenarioId && s.status === 'running' ? { ...s, successfulRequests: p.successful, failedRequests: p.failed } : s,
  );
  return {
    ...run,
    scenarios,
    successfulRequests: scenarios.reduce((n, s) => n + s.successfulRequests, 0),
    failedRequests: scenarios.reduce((n, s) => n + s.failedRequests, 0),
  };
}

/** The scenario grid: one row per latency family, one column per statistic. */
export const GRID_STATS = STATS;
export const GRID_ROWS: Array<{ prefix: 'ttft' | 'e2e' | 'tps'; label: string; format: MetricDef['format'] }> = [
  { prefix: 'ttft', label: 'TTFT', format: formatMs },
  { prefix: 'e2e', label: 'E2E latency', format: formatMs },
  { prefix: 'tps', label: 'Decode rate', format: tokensPerSecond },
];

export function gridValue(m: BenchmarkMetrics, prefix: 'ttft' | 'e2e' | 'tps', stat: (typeof STATS)[number]): number | null {
  return m[`${prefix}${stat}` as MetricKey];
}
