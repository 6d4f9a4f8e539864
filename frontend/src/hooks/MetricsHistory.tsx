// The charts' history: the server samples GPU memory and the proxy's counters every 5 s
// and keeps the last hour (GET /api/v1/metrics/history), so a reload or a second tab
// starts with full charts. The tab fetches the whole ring once, then only newer samples.

import { useQueryClient } from '@tanstack/react-query';
import { createContext, useContext, useEffect, useRef, useState, type ReactNode } from 'react';
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

export function MetricsHistoryProvider({ children }: { children: ReactNode }) {
  const qc = useQueryClient();
  const [history, setHistory] = useState<History>({ points: [], error: null });
  const last = useRef<HistorySample | null>(null);

  useEffect(() => {
    let cancelled = false;
    const poll = async (): Promise<void> => {
      try {
        const since = last.current ? `?since=${last.current.t}` : '';
        const [report, gpus] = await Promise.all([
          api<HistoryReport>(`/api/v1/metrics/history${since}`),
          api<GpuReport>('/api/v1/gpus'),
        ]);
        if (cancelled) return;
        qc.setQueryData(keys.gpus, gpus);
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
  }, [qc]);

  return <HistoryContext.Provider value={history}>{children}</HistoryContext.Provider>;
}

/** One pod's history (`?pod=`), polled while `pod` is set (the Charts page's pod choice);
 * empty when it is null. The app-wide provider above keeps the whole cluster's. */
export function usePodHistory(pod: string | null): History {
  const [history, setHistory] = useState<History>({ points: [], error: null });
  const last = useRef<HistorySample | null>(null);

  useEffect(() => {
    last.current = null;
    setHistory({ points: [], error: null });
    if (pod === null) return undefined;
    let cancelled = false;
    const poll = async (): Promise<void> => {
      try {
        const qs = new URLSearchParams({ pod });
        if (last.current) qs.set('since', String(last.current.t));
        const report = await api<HistoryReport>(`/api/v1/metrics/history?${qs.toString()}`);
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
  }, [pod]);

  return history;
}
