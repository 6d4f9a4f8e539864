import { describe, expect, it } from 'vitest';
import type { BenchmarkMetrics, BenchmarkRun, BenchmarkScenario } from '../api/types';
import { compareValue, latencyBars, METRICS, pairScenarios, scenarioPercent } from './benchmarks';

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
    expect(compareValue(100, 80, 'lower')).toEqual({ ratio: -0.2, verdict: 'better' });
    expect(compareValue(100, 80, 'higher').verdict).toBe('worse');
    expect(compareValue(100, 101, 'lower').verdict).toBe('same');
  });

  it('is not applicable without both values or with a zero baseline', () => {
    expect(compareValue(null, 1, 'lower').verdict).toBe('n/a');
    expect(compareValue(0, 1, 'higher').verdict).toBe('n/a');
  });
});

describe('run shaping', () => {
  it('pairs scenarios by position, leaving gaps', () => {
    const pairs = pairScenarios(run([scenario('a1'), scenario('a2')]), run([scenario('b1')]));
    expect(pairs.map((p) => [p.a?.id ?? null, p.b?.id ?? null])).toEqual([
      ['a1', 'b1'],
      ['a2', null],
    ]);
    expect(pairs[0]?.title).toBe('#1 qwen · direct · c4 · 128→64 tok');
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
