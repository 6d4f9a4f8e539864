// Chart data shaping: polled samples -> aligned series for the time-series charts.

import type { ModelRates } from './prometheus';

export interface GpuSample {
  /** The pod it is on (cluster mode). */
  pod?: string;
  index: number;
  name: string;
  usedBytes: number;
  totalBytes: number;
}

export interface HistoryPoint {
  /** Unix time in seconds. */
  t: number;
  gpus: GpuSample[];
  /** Null for the first scrape (a rate needs two). */
  models: ModelRates[] | null;
}

export interface Series {
  label: string;
  values: Array<number | null>;
  /** Colour slot (default: the series' position) and a dashed line, to pair related series. */
  colorIndex?: number;
  dashed?: boolean;
}

export interface ChartData {
  /** Unix seconds, ascending. */
  xs: number[];
  series: Series[];
}

/** Keeps the points of the last `windowSeconds` (the newest point's clock). */
export function appendPoint(history: HistoryPoint[], point: HistoryPoint, windowSeconds: number): HistoryPoint[] {
  const cutoff = point.t - windowSeconds;
  return [...history.filter((p) => p.t >= cutoff && p.t < point.t), point];
}

/**
 * Aligns named values across points: one series per name (first seen first),
 * null where a point lacks that name (a model loaded later, or unloaded).
 */
function collect(points: HistoryPoint[], entries: (p: HistoryPoint) => Array<[string, number | null]>): ChartData {
  const labels: string[] = [];
  const rows = points.map((p) => {
    const row = new Map(entries(p));
    for (const label of row.keys()) if (!labels.includes(label)) labels.push(label);
    return row;
  });
  return {
    xs: points.map((p) => p.t),
    series: labels.map((label) => ({ label, values: rows.map((row) => row.get(label) ?? null) })),
  };
}

const GIB = 2 ** 30;

export function gpuMemorySeries(points: HistoryPoint[]): ChartData {
  return collect(points, (p) =>
    p.gpus.map((g) => [`${g.pod ? `${g.pod} ` : ''}GPU ${g.index} ${g.name}`, g.usedBytes / GIB]),
  );
}

export function requestRateSeries(points: HistoryPoint[]): ChartData {
  return collect(points.filter((p) => p.models !== null), (p) =>
    (p.models ?? []).map((m) => [m.model, m.requestsPerSecond]),
  );
}

/** Latency quantiles in milliseconds: per model, p50 solid and p95 dashed in one colour. */
export function latencySeries(points: HistoryPoint[]): ChartData {
  const data = collect(points.filter((p) => p.models !== null), (p) =>
    (p.models ?? []).flatMap((m): Array<[string, number | null]> => [
      [`${m.model} p50`, m.p50 === null ? null : m.p50 * 1000],
      [`${m.model} p95`, m.p95 === null ? null : m.p95 * 1000],
    ]),
  );
  return { ...data, series: data.series.map((s, i) => ({ ...s, colorIndex: i >> 1, dashed: i % 2 === 1 })) };
}

/** One latency quantile per model, in milliseconds (p50 and p95 get their own panels). */
export function latencyQuantileSeries(points: HistoryPoint[], q: 'p50' | 'p95'): ChartData {
  return collect(points.filter((p) => p.models !== null), (p) =>
    (p.models ?? []).map((m): [string, number | null] => [m.model, m[q] === null ? null : m[q] * 1000]),
  );
}

const pad = (n: number): string => String(n).padStart(2, '0');

/**
 * A time-axis tick in the browser's local time: HH:MM, with seconds when the visible
 * span is under five minutes (otherwise ticks would repeat the same minute).
 */
export function clockLabel(unixSeconds: number, spanSeconds: number): string {
  const d = new Date(unixSeconds * 1000);
  const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return spanSeconds < 300 ? `${hm}:${pad(d.getSeconds())}` : hm;
}
