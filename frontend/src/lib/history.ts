// The server's metrics history (GET /api/v1/metrics/history) -> chart points.
//
// The server counts, per sampling interval and per model, the requests that ended, the
// 5xx among them, and the p50/p95 of their own latencies (from the request log of every
// pod: src/sardeenz/metrics_history.py); the browser only turns counts into rates.

import type { ModelRates } from './prometheus';
import type { HistoryPoint } from './series';

export interface HistoryModelSample {
  model: string;
  /** The pod (null: every pod together). */
  pod: string | null;
  /** Requests that ended in the interval, and the 5xx among them. */
  requests: number;
  errors: number;
  inFlight: number;
  /** Seconds; null when no request was answered in the interval. */
  p50: number | null;
  p95: number | null;
}

export interface HistoryGpu {
  pod: string | null;
  index: number;
  name: string;
  usedBytes: number;
  totalBytes: number;
}

export interface HistorySample {
  t: number;
  /** The interval the counts cover. */
  seconds: number;
  gpus: HistoryGpu[];
  models: HistoryModelSample[];
}

export interface HistoryReport {
  intervalSeconds: number;
  windowSeconds: number;
  pod: string | null;
  samples: HistorySample[];
}

/** Chart points for `samples` (oldest first). The first sample the server took has no
 * interval behind it (seconds 0): it has no rates. */
export function pointsFromSamples(samples: HistorySample[]): HistoryPoint[] {
  return samples.map((s) => {
    const models: ModelRates[] | null =
      s.seconds > 0
        ? s.models
            .map((m) => ({
              model: m.model,
              requestsPerSecond: m.requests / s.seconds,
              errorsPerSecond: m.errors / s.seconds,
              inFlight: m.inFlight,
              p50: m.p50,
              p95: m.p95,
            }))
            .sort((a, b) => a.model.localeCompare(b.model))
        : null;
    return {
      t: s.t,
      gpus: s.gpus.map((g) => ({ ...g, pod: g.pod ?? undefined })),
      models,
    };
  });
}
