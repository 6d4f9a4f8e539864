import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Content, Flex, FlexItem, Title } from '@patternfly/react-core';
import { formatBytes } from '../lib/format';
import { gpuBars } from '../lib/gpuBars';
import { seriesColor } from '../lib/palette';
import { SimulatedLabel } from './StatusLabel';
import './GpuMemoryBars.css';
const OTHER_COLOR = 'var(--pf-t--global--color--nonstatus--gray--default, #8a8d90)';
function segmentColor(seg, order) {
    if (seg.kind === 'free')
        return 'transparent';
    if (seg.kind === 'other')
        return OTHER_COLOR;
    return seriesColor(order.get(seg.key) ?? 0);
}
function tip(seg) {
    const base = `${seg.label}: ${formatBytes(seg.bytes)}`;
    return seg.baselineBytes !== undefined ? `${base} (baseline ${formatBytes(seg.baselineBytes)})` : base;
}
/** Per-GPU memory: one stacked bar each, split by instance, other processes and free. */
export function GpuMemoryBars({ report, instances }) {
    const bars = gpuBars(report.gpus, report.budgets, instances);
    const order = new Map(instances.map((inst, i) => [inst.id, i]));
    return (_jsx("div", { className: "sz-gpu-bars", children: bars.map((bar) => (_jsxs("section", { className: "sz-gpu-bar", "data-gpu": bar.index, "data-used-bytes": bar.usedBytes, children: [_jsxs(Flex, { justifyContent: { default: 'justifyContentSpaceBetween' }, alignItems: { default: 'alignItemsCenter' }, children: [_jsx(FlexItem, { children: _jsxs(Title, { headingLevel: "h3", size: "md", children: ["GPU ", bar.index, " \u00B7 ", bar.name, " ", bar.simulated && _jsx(SimulatedLabel, {})] }) }), _jsx(FlexItem, { children: _jsxs(Content, { component: "small", children: [formatBytes(bar.usedBytes), " used of ", formatBytes(bar.totalBytes), " \u00B7 ", formatBytes(bar.freeBytes), " free", bar.kvCacheTotalBytes !== null && _jsxs(_Fragment, { children: [" \u00B7 KV cache room ", formatBytes(bar.kvCacheTotalBytes)] })] }) })] }), _jsx("div", { className: "sz-gpu-bar__track", role: "img", "aria-label": `GPU ${bar.index}: ${bar.segments.map(tip).join('; ')}`, children: bar.segments
                        .filter((seg) => seg.kind !== 'free' && seg.fraction > 0)
                        .map((seg) => (_jsx("div", { className: "sz-gpu-bar__segment", title: tip(seg), "data-segment": seg.kind, "data-instance-id": seg.instanceId, "data-bytes": seg.bytes, style: { width: `${(seg.fraction * 100).toFixed(2)}%`, background: segmentColor(seg, order) } }, seg.key))) }), _jsx("ul", { className: "sz-gpu-bar__legend", children: bar.segments.map((seg) => (_jsxs("li", { children: [_jsx("span", { className: "sz-swatch", style: { background: segmentColor(seg, order) } }), tip(seg)] }, seg.key))) })] }, bar.index))) }));
}
