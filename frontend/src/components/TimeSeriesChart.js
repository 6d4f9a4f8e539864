import { jsxs as _jsxs, jsx as _jsx } from "react/jsx-runtime";
import { Bullseye, Content } from '@patternfly/react-core';
import { useEffect, useRef } from 'react';
import uPlot, {} from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { clockLabel } from '../lib/series';
import { resolvedColor } from '../lib/palette';
/** With the cursor off the chart, the legend shows the newest values (live), not dashes. */
function showLatest(u) {
    const n = u.data[0]?.length ?? 0;
    if (u.cursor.idx == null && n > 0)
        u.setLegend({ idx: n - 1 }, false);
}
function options(data, unit, width, height) {
    const fmt = (v) => (v == null ? '—' : `${Number(v.toFixed(v < 10 ? 2 : 0))} ${unit}`);
    return {
        width,
        height,
        scales: { x: { time: true }, y: { range: (_u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] } },
        axes: [
            { values: (u, ticks) => ticks.map((t) => clockLabel(t, (u.scales.x?.max ?? 0) - (u.scales.x?.min ?? 0))), space: 70 },
            { values: (_u, ticks) => ticks.map((t) => `${Number(t.toPrecision(3))}`), label: unit, size: 60 },
        ],
        hooks: { setCursor: [showLatest], setSeries: [showLatest] },
        series: [
            { value: (_u, v) => (v == null ? '—' : clockLabel(v, 0)) },
            ...data.series.map((s, i) => ({
                label: s.label,
                stroke: resolvedColor(s.colorIndex ?? i),
                width: 2,
                ...(s.dashed ? { dash: [6, 4] } : {}),
                value: (_u, v) => fmt(v),
            })),
        ],
        legend: { live: true },
        cursor: { drag: { x: false, y: false } },
    };
}
/** A line chart over time (uPlot, canvas): chosen for size, see docs/dashboard.md. */
export function TimeSeriesChart({ data, unit, height = 220, emptyText }) {
    const host = useRef(null);
    const plot = useRef(null);
    const shape = data.series.map((s) => s.label).join('\n');
    const hasData = data.xs.length > 1 && data.series.length > 0;
    // Rebuild when the set of series changes; otherwise only push new data.
    useEffect(() => {
        const el = host.current;
        if (!el || !hasData)
            return undefined;
        const aligned = [data.xs, ...data.series.map((s) => s.values)];
        const chart = new uPlot(options(data, unit, el.clientWidth || 600, height), aligned, el);
        plot.current = chart;
        showLatest(chart);
        const resize = new ResizeObserver(() => chart.setSize({ width: el.clientWidth, height }));
        resize.observe(el);
        return () => {
            resize.disconnect();
            chart.destroy();
            plot.current = null;
        };
        // `data` is deliberately not a dependency: the effect below pushes new data.
    }, [shape, unit, height, hasData]);
    useEffect(() => {
        const chart = plot.current;
        if (!chart)
            return;
        chart.setData([data.xs, ...data.series.map((s) => s.values)]);
        showLatest(chart);
    }, [data]);
    if (!hasData) {
        return (_jsx(Bullseye, { style: { height }, children: _jsxs(Content, { component: "p", children: [emptyText, ": the chart fills in as samples arrive."] }) }));
    }
    return _jsx("div", { ref: host, className: "sz-chart" });
}
