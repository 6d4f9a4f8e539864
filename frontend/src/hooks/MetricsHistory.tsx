// The charts' history: the server samples GPU memory and the proxy's counters every 5 s
// and keeps the last hour (GET /api/v1/metrics/history), so a reload or a second tab
// starts with full charts. The tab fetches the whole ring once, then only newer samples.

import { useQueryClient } from '@tanstack/react-query';
import { createContext, useCallback, useContext, useEffect, useMemo, useRef, useState, type ReactNode } from 'react';
import { api } from '../api/client';
import { keys } from '../api/queries';
import type { GpuReport } from '../api/types';
import { pointsFromSamples, type HistoryReport, type HistorySample } from '../lib/history';
import { appendPoint, type HistoryPoint } from '../lib/series';

export const SAMPLE_SECONDS = 5;
export const WINDOW_SECONDS = 3600;

interface History {
  points: HistoryPoint[];
  error: Error | null;
}

const HistoryContext = createContext<History>({ points: [], error: null });

export function useMetricsHistory(): History {
  return useContext(HistoryContext);
}

const EMPTY: History = { points: [], error: null };

/** Fetches one page of history: the samples after `since` (all it keeps when null). */
type HistoryLoader = (since: number | null) => Promise<HistoryReport>;

/** The history `load` answers: its whole ring once, then every SAMPLE_SECONDS only the
 * newer samples, appended to a WINDOW_SECONDS window. A new `load` starts afresh; null
 * polls nothing and holds no points. */
function usePolledHistory(load: HistoryLoader | null): History {
  const [history, setHistory] = useState<History>(EMPTY);
  const last = useRef<HistorySample | null>(null);

  useEffect(() => {
    last.current = null;
    setHistory(EMPTY);
    if (load === null) return undefined;
    let cancelled = false;
    const poll = async (): Promise<void> => {
      try {
        const report = await load(last.current ? last.current.t : null);
        if (cancelled) return;
        const fresh = pointsFromSamples(report.samples);
        last.current = report.samples[report.samples.length - 1] ?? last.current;
        setHistory((h) => {
          let points = h.points;
          for (const p of fresh) points = appendPoint(points, p, WINDOW_SECONDS);
          return { points, error: null };
        });
      } catch (e) {
        if (!cancelled) setHistory((h) => ({ ...h, error: e as Error }));
      }
    };
    void poll();
    const timer = setInterval(() => void poll(), SAMPLE_SECONDS * 1000);
    return () => {
      cancelled = true;
      clearInterval(timer);
    };
  }, [load]);

  return history;
}

/** The whole cluster's history for every page; each poll also refreshes the GPU report
 * the pages read (one request fewer than a poll of its own). */
export function MetricsHistoryProvider({ children }: { children: ReactNode }) {
  const qc = useQueryClient();
  const load = useCallback<HistoryLoader>(
    async (since) => {
      const [report, gpus] = await Promise.all([
        api<HistoryReport>(`/api/v1/metrics/history${since === null ? '' : `?since=${since}`}`),
        api<GpuReport>('/api/v1/gpus'),
      ]);
      qc.setQueryData(keys.gpus, gpus);
      return report;
    },
    [qc],
  );
  const history = usePolledHistory(load);
  return <HistoryContext.Provider value={history}>{children}</HistoryContext.Provider>;
}

/** One pod's history (`?pod=`), polled while `pod` is set (the Charts page's pod choice);
 * empty when it is null. The app-wide provider above keeps the whole cluster's. */
export function usePodHistory(pod: string | null): History {
  const load = useMemo<HistoryLoader | null>(
    () =>
      pod === null
        ? null
        : (since) => {
            const qs = new URLSearchParams({ pod });
            if (since !== null) qs.set('since', String(since));
            return api<HistoryReport>(`/api/v1/metrics/history?${qs.toString()}`);
          },
    [pod],
  );
  return usePolledHistory(load);
}
