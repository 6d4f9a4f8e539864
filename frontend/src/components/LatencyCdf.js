import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { quantileCdf, fractionWithin, niceTicks } from '../lib/cdf';
import { formatMs } from '../lib/format';
import { resolvedColor } from '../lib/palette';
const W = 360;
const H = 200;
const PAD = { left: 44, right: 28, top: 10, bottom: 34 };
/** One latency's CDF (SVG, its own x scale), with the SLA line when there is one. */
function Cdf({ title, points, slaMs, color }) {
    const maxX = Math.max(points[points.length - 1]?.[0] ?? 1, slaMs ?? 0);
    const ticks = niceTicks(maxX, 4);
    const top = ticks[ticks.length - 1] ?? 1;
    const x = (ms) => PAD.left + (ms / top) * (W - PAD.left - PAD.right);
    const y = (f) => H - PAD.bottom - f * (H - PAD.top - PAD.bottom);
    const path = points.map(([ms, f], i) => `${i ? 'L' : 'M'}${x(ms).toFixed(1)},${y(f).toFixed(1)}`).join(' ');
    const within = slaMs === null ? null : fractionWithin(points, slaMs);
    return (_jsxs("figure", { className: "sz-cdf", "data-cdf": title, children: [_jsxs("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${title} distribution`, children: [[0, 0.5, 0.9, 1].map((f) => (_jsxs("g", { children: [_jsx("line", { x1: PAD.left, x2: W - PAD.right, y1: y(f), y2: y(f), className: "sz-cdf-grid" }), _jsxs("text", { x: PAD.left - 4, y: y(f) + 4, textAnchor: "end", className: "sz-cdf-tick", children: [Math.round(f * 100), "%"] })] }, f))), ticks.map((t) => (_jsx("text", { x: x(t), y: H - PAD.bottom + 14, textAnchor: "middle", className: "sz-cdf-tick", children: formatMs(t) }, t))), _jsx("path", { d: path, fill: "none", stroke: color, strokeWidth: 2 }), slaMs !== null && (_jsxs("g", { "data-sla": slaMs, children: [_jsx("line", { x1: x(slaMs), x2: x(slaMs), y1: PAD.top, y2: H - PAD.bottom, className: "sz-cdf-sla" }), _jsxs("text", { x: x(slaMs) + 4, y: PAD.top + 10, className: "sz-cdf-tick", children: ["SLA ", formatMs(slaMs)] })] })), _jsxs("text", { x: (W + PAD.left) / 2, y: H - 4, textAnchor: "middle", className: "sz-cdf-tick", children: [title, " (ms)"] })] }), within !== null && _jsxs("figcaption", { children: ["\u2248 ", Math.round(within * 100), "% of requests within the SLA"] })] }));
}
/** TTFT and E2E distributions of one scenario, each on its own scale; the SLA (end-to-end,
 * as goodput counts it) on the E2E chart. Joined from the recorded quantiles. */
export function LatencyCdf({ metrics, slaMs }) {
    return (_jsxs("div", { className: "sz-cdf-pair", children: [_jsx(Cdf, { title: "TTFT", points: quantileCdf(metrics, 'ttft'), slaMs: null, color: resolvedColor(0) }), _jsx(Cdf, { title: "E2E latency", points: quantileCdf(metrics, 'e2e'), slaMs: slaMs, color: resolvedColor(1) })] }));
}
