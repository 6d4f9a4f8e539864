import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Content } from '@patternfly/react-core';
import { seriesColor } from '../lib/palette';
import './BarChart.css';
/** Horizontal grouped bars (plain HTML/CSS): one group per scenario, one bar per figure. */
export function BarChart({ groups, format }) {
    const max = Math.max(1e-9, ...groups.flatMap((g) => g.values.map(([, v]) => v)));
    return (_jsx("div", { className: "sz-bars", role: "img", "aria-label": groups.map((g) => g.label).join('; '), children: groups.map((g) => (_jsxs("figure", { className: "sz-bars__group", children: [_jsx(Content, { component: "small", children: _jsx("figcaption", { children: g.label }) }), g.values.map(([name, value], i) => (_jsxs("div", { className: "sz-bars__row", children: [_jsx("span", { className: "sz-bars__name", children: name }), _jsx("span", { className: "sz-bars__track", children: _jsx("span", { className: "sz-bars__bar", style: { width: `${(value / max) * 100}%`, background: seriesColor(i) } }) }), _jsx("span", { className: "sz-bars__value", children: format(value) })] }, name)))] }, g.label))) }));
}
