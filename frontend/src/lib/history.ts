// The server's metrics history (GET /api/v1/metrics/history) -> chart points.
//
// The server keeps raw counters (see src/sardeenz/metrics_history.py); rates and
// quantiles between consecutive samples come from the same functions as a live scrape.

import { ratesBetween, type Buckets, type ModelCounters } from './prometheus';
import type { HistoryPoint } from './series';

export interface HistoryModelSample {
  model: string;
  requests: number;
  errors: number;
  inFlight: number;
  /** Cumulative bucket counts, one per `durationBounds` entry, then +Inf. */
  duration: number[];
}

export interface HistorySample {
  t: number;
  gpus: Array<{ index: number; name: string; usedBytes: number; totalBytes: number }>;
  models: HistoryModelSample[];
}

export interface HistoryReport {
  intervalSeconds: number;
  windowSeconds: number;
  durationBounds: number[];
  samples: HistorySample[];
}

export function countersOf(sample: HistorySample, bounds: number[]): Map<string, ModelCounters> {
  const out = new Map<string, ModelCounters>();
  for (const m of sample.models) {
    const duration: Buckets = m.duration.map((count, i) => [bounds[i] ?? Infinity, count]);
    out.set(m.model, { model: m.model, requests: m.requests, errors: m.errors, inFlight: m.inFlight, duration });
  }
  return out;
}

/**
 * Chart points for `samples` (oldest first). `before` is the sample preceding them (from
 * an earlier fetch), so the first new point gets rates too; without it the first point
 * has none (a rate needs two samples).
 */
export function pointsFromSamples(samples: HistorySample[], bounds: number[], before: HistorySample | null): HistoryPoint[] {
  let prev = before;
  return samples.map((s) => {
    const models = prev ? ratesBetween(countersOf(prev, bounds), countersOf(s, bounds), s.t - prev.t) : null;
    prev = s;
    return { t: s.t, gpus: s.gpus, models };
  });
}
