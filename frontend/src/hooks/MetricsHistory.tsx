// Polls the proxy metrics and GPU memory while the dashboard is open, keeping
// ten minutes of history for the charts and the "at a glance" figures.

import { useQueryClient } from '@tanstack/react-query';
import { createContext, useContext, useEffect, useRef, useState, type ReactNode } from 'react';
import { api } from '../api/client';
import { fetchMetricsText, keys } from '../api/queries';
import type { GpuReport } from '../api/types';
import { modelCounters, parsePrometheus, ratesBetween, type ModelCounters } from '../lib/prometheus';
import { appendPoint, type HistoryPoint } from '../lib/series';

export const SAMPLE_SECONDS = 5;
const WINDOW_SECONDS = 600;

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
  const last = useRef<{ t: number; counters: Map<string, ModelCounters> } | null>(null);

  useEffect(() => {
    let cancelled = false;
    const sample = async (): Promise<void> => {
      try {
        const [text, gpus] = await Promise.all([fetchMetricsText(), api<GpuReport>('/api/v1/gpus')]);
        if (cancelled) return;
        qc.setQueryData(keys.gpus, gpus);
        const t = Date.now() / 1000;
        const counters = modelCounters(parsePrometheus(text));
        const prev = last.current;
        last.current = { t, counters };
        const point: HistoryPoint = {
          t,
          gpus: gpus.gpus.map((g) => ({ index: g.index, name: g.name, usedBytes: g.usedBytes, totalBytes: g.totalBytes })),
          models: prev ? ratesBetween(prev.counters, counters, t - prev.t) : null,
        };
        setHistory((h) => ({ points: appendPoint(h.points, point, WINDOW_SECONDS), error: null }));
      } catch (e) {
        if (!cancelled) setHistory((h) => ({ ...h, error: e as Error }));
      }
    };
    void sample();
    const timer = setInterval(() => void sample(), SAMPLE_SECONDS * 1000);
    return () => {
      cancelled = true;
      clearInterval(timer);
    };
  }, [qc]);

  return <HistoryContext.Provider value={history}>{children}</HistoryContext.Provider>;
}
