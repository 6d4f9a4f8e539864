import { describe, expect, it } from 'vitest';
import type { BenchmarkMetrics, BenchmarkRun, BenchmarkScenario } from '../api/types';
import { applyProgress, compareValue, deltaText, GRID_ROWS, GRID_STATS, gridValue, latencyBars, METRICS, pairScenarios, scenarioPercent } from './benchmarks';

const metrics = (scale: number): BenchmarkMetrics => {
  const m: Record<string, number | string> = { scenarioId: 's' };
  for (const def of METRICS) m[def.key] = scale;
  return m as unknown as BenchmarkMetrics;
};

const scenario = (id: string, over: Partial<BenchmarkScenario> = {}): BenchmarkScenario => ({
  id,
  runId: 'r',
  instanceId: 'i',
  routingMode: 'direct',
  modelPath: 'm',
  modelName: 'qwen',
  inputTokens: 128,
  outputTokens: 64,
  concurrency: 4,
  warmupRequests: 2,
  totalRequests: 20,
  slaThresholdMs: null,
  status: 'completed',
  promptSource: 'tokenizer',
  successfulRequests: 20,
  failedRequests: 0,
  startedAt: null,
  completedAt: null,
  errorMessage: null,
  metrics: metrics(10),
  ...over,
});

const run = (scenarios: BenchmarkScenario[]): BenchmarkRun => ({
  id: 'r',
  name: null,
  status: 'completed',
  mode: 'isolated',
  kvcachedEnabled: true,
  createdAt: '2026-01-01T00:00:00Z',
  startedAt: null,
  completedAt: null,
  errorMessage: null,
  totalRequests: 20,
  successfulRequests: 20,
  failedRequests: 0,
  durationSeconds: 1,
  scenarios,
});

describe('METRICS', () => {
  it('covers every field of the seed BenchmarkMetrics exactly once', () => {
    const keys = METRICS.map((m) => m.key);
    expect(new Set(keys).size).toBe(keys.length);
    expect(keys).toHaveLength(25); // 3 x 7 statistics + goodput count/percent + 2 throughputs
    expect(keys).toContain('ttftP99');
    expect(keys).toContain('tokensPerSecondTotal');
  });
});

describe('compareValue', () => {
  it('lower latency is better, higher throughput is better', () => {
    expect(compareValue(100, 80, 'lower')).toEqual({ ratio: -0.2, diff: -20, verdict: 'better' });
    expect(compareValue(100, 80, 'higher').verdict).toBe('worse');
    expect(compareValue(100, 101, 'lower').verdict).toBe('same');
  });

  it('is not applicable without both values or with a zero baseline', () => {
    expect(compareValue(null, 1, 'lower').verdict).toBe('n/a');
    expect(compareValue(0, 1, 'higher').verdict).toBe('n/a');
  });
});

describe('run shaping', () => {
  it('pairs scenarios by identity (model, routing, shape), not by position', () => {
    const a = run([scenario('a1'), scenario('a2', { concurrency: 8 }), scenario('a3', { modelName: 'llama' })]);
    // B has the same scenarios in another order, one missing and one new.
    const b = run([scenario('b2', { concurrency: 8 }), scenario('b4', { routingMode: 'proxy' }), scenario('b1')]);
    const pairs = pairScenarios(a, b);
    expect(pairs.map((p) => [p.a?.id ?? null, p.b?.id ?? null])).toEqual([
      ['a1', 'b1'],
      ['a2', 'b2'],
      ['a3', null],
      [null, 'b4'],
    ]);
    expect(pairs[0]?.title).toBe('qwen · direct · c4 · 128→64');
    expect(pairs[3]?.title).toBe('qwen · proxy · c4 · 128→64');
  });

  it('pairs a concurrency sweep across concurrencies, side by side (issue 25)', () => {
    const a = run([scenario('a4', { concurrency: 4 }), scenario('a1', { concurrency: 1 })]);
    const b = run([scenario('b8', { concurrency: 8 }), scenario('b2', { concurrency: 2 }), scenario('x', { modelName: 'other' })]);
    const pairs = pairScenarios(a, b);
    // Lowest with lowest: c1 with c2, c4 with c8; another model stays alone.
    expect(pairs.map((p) => [p.a?.id ?? null, p.b?.id ?? null])).toEqual([
      ['a4', 'b8'],
      ['a1', 'b2'],
      [null, 'x'],
    ]);
    expect(pairs[0]?.concurrency).toEqual({ a: 4, b: 8 });
    expect(pairs[0]?.title).toBe('qwen · direct · 128→64 · c4 (A) vs c8 (B)');
    expect(pairs[2]?.concurrency).toBeUndefined();
  });

  it('an exact match wins over a concurrency pairing', () => {
    const a = run([scenario('a4', { concurrency: 4 }), scenario('a8', { concurrency: 8 })]);
    const b = run([scenario('b8', { concurrency: 8 }), scenario('b16', { concurrency: 16 })]);
    expect(pairScenarios(a, b).map((p) => [p.a?.id, p.b?.id, p.concurrency ?? null])).toEqual([
      ['a4', 'b16', { a: 4, b: 16 }],
      ['a8', 'b8', null],
    ]);
  });

  it('pairs repeated identities in order and keeps titles unique', () => {
    const pairs = pairScenarios(run([scenario('a1'), scenario('a2')]), run([scenario('b1')]));
    expect(pairs.map((p) => [p.a?.id ?? null, p.b?.id ?? null])).toEqual([
      ['a1', 'b1'],
      ['a2', null],
    ]);
    expect(new Set(pairs.map((p) => p.title)).size).toBe(2);
  });

  it('never shows a count as a percentage gain', () => {
    const count = METRICS.find((m) => m.key === 'goodputCount');
    const percent = METRICS.find((m) => m.key === 'goodputPercent');
    expect(deltaText(compareValue(20, 30, 'higher'), count?.delta)).toBe('+10');
    expect(deltaText(compareValue(90, 85.5, 'higher'), percent?.delta)).toBe('−4.5 pp');
    expect(deltaText(compareValue(100, 80, 'lower'))).toBe('−20.0%');
    expect(deltaText(compareValue(0, 5, 'higher'), count?.delta)).toBe('+5');
    expect(deltaText(compareValue(null, 5, 'higher'), count?.delta)).toBe('—');
  });

  it('latency bars skip scenarios without metrics', () => {
    const bars = latencyBars(run([scenario('a'), scenario('b', { metrics: null, status: 'failed' })]));
    expect(bars).toHaveLength(1);
    expect(bars[0]?.values.map(([name]) => name)).toEqual(['TTFT p50', 'TTFT p95', 'TTFT p99', 'E2E p50', 'E2E p95', 'E2E p99']);
  });

  it('progress counts the measured phase only', () => {
    const running = scenario('s', { status: 'running' });
    expect(scenarioPercent(running, { phase: 'warmup', completed: 2, total: 2 })).toBe(0);
    expect(scenarioPercent(running, { phase: 'measure', completed: 5, total: 20 })).toBe(25);
    expect(scenarioPercent(scenario('done'))).toBe(100);
    expect(scenarioPercent(scenario('p', { status: 'pending', successfulRequests: 0 }))).toBe(0);
  });
});

describe('live counters', () => {
  it('a measure progress event sets the running scenario and the run totals like the API', () => {
    const r = run([scenario('done', { successfulRequests: 20 }), scenario('live', { status: 'running', successfulRequests: 0 })]);
    const next = applyProgress(r, { scenarioId: 'live', phase: 'measure', successful: 7, failed: 1 });
    expect(next.scenarios[1]).toMatchObject({ successfulRequests: 7, failedRequests: 1 });
    expect([next.successfulRequests, next.failedRequests]).toEqual([27, 1]);
    // Warm-up requests are not counted, as the API does not count them.
    expect(applyProgress(r, { scenarioId: 'live', phase: 'warmup', successful: 2, failed: 0 })).toBe(r);
  });

  it('the grid reads every statistic of a family', () => {
    const m = metrics(10);
    expect(GRID_ROWS.flatMap((row) => GRID_STATS.map((s) => gridValue(m, row.prefix, s)))).toHaveLength(21);
  });
});
