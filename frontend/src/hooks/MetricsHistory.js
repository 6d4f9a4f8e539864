import { jsx as _jsx } from "react/jsx-runtime";
// The charts' history: the server samples GPU memory and the proxy's counters every 5 s
// and keeps the last hour (GET /api/v1/metrics/history), so a reload or a second tab
// starts with full charts. The tab fetches the whole ring once, then only newer samples.
import { useQueryClient } from '@tanstack/react-query';
import { createContext, useContext, useEffect, useRef, useState } from 'react';
import { api } from '../api/client';
import { keys } from '../api/queries';
import { pointsFromSamples } from '../lib/history';
import { appendPoint } from '../lib/series';
export const SAMPLE_SECONDS = 5;
export const WINDOW_SECONDS = 3600;
const HistoryContext = createContext({ points: [], error: null });
export function useMetricsHistory() {
    return useContext(HistoryContext);
}
export function MetricsHistoryProvider({ children }) {
    const qc = useQueryClient();
    const [history, setHistory] = useState({ points: [], error: null });
    const last = useRef(null);
    useEffect(() => {
        let cancelled = false;
        const poll = async () => {
            try {
                const since = last.current ? `?since=${last.current.t}` : '';
                const [report, gpus] = await Promise.all([
                    api(`/api/v1/metrics/history${since}`),
                    api('/api/v1/gpus'),
                ]);
                if (cancelled)
                    return;
                qc.setQueryData(keys.gpus, gpus);
                const fresh = pointsFromSamples(report.samples, report.durationBounds, last.current);
                last.current = report.samples[report.samples.length - 1] ?? last.current;
                setHistory((h) => {
                    let points = h.points;
                    for (const p of fresh)
                        points = appendPoint(points, p, WINDOW_SECONDS);
                    return { points, error: null };
                });
            }
            catch (e) {
                if (!cancelled)
                    setHistory((h) => ({ ...h, error: e }));
            }
        };
        void poll();
        const timer = setInterval(() => void poll(), SAMPLE_SECONDS * 1000);
        return () => {
            cancelled = true;
            clearInterval(timer);
        };
    }, [qc]);
    return _jsx(HistoryContext.Provider, { value: history, children: children });
}
