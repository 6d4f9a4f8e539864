import { jsx as _jsx } from "react/jsx-runtime";
import { Label } from '@patternfly/react-core';
const COLORS = {
    starting: 'blue',
    active: 'green',
    sleeping: 'purple',
    stopping: 'orange',
    failed: 'red',
};
export function StatusLabel({ status, sleepLevel, count }) {
    const base = status === 'sleeping' && sleepLevel ? `sleeping (level ${sleepLevel})` : status;
    const text = count === undefined ? base : `${count} ${base}`;
    return (_jsx(Label, { color: COLORS[status], isCompact: true, "data-status": status, children: text }));
}
/** Marks anything that is not real hardware or a real engine. */
export function SimulatedLabel({ what = 'simulated' }) {
    return (_jsx(Label, { color: "yellow", isCompact: true, variant: "outline", children: what }));
}
