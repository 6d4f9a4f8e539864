import { jsx as _jsx } from "react/jsx-runtime";
import { Label } from '@patternfly/react-core';
const COLORS = {
    pending: 'grey',
    running: 'blue',
    completed: 'green',
    cancelled: 'orange',
    failed: 'red',
};
export function RunStatusLabel({ status }) {
    return (_jsx(Label, { color: COLORS[status], isCompact: true, "data-status": status, children: status }));
}
