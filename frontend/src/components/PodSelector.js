import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { FormGroup, FormHelperText, FormSelect, FormSelectOption, HelperText, HelperTextItem } from '@patternfly/react-core';
import { orderedPods } from '../lib/cluster';
/** The load dialog's pod choice (cluster mode only): "any" leaves it to the leader,
 *  a pod id is sent as `podId`. Unavailable pods cannot be chosen. */
export function PodSelector({ status, value, onChange }) {
    return (_jsxs(FormGroup, { label: "Pod", fieldId: "load-pod", children: [_jsxs(FormSelect, { id: "load-pod", value: value, onChange: (_e, v) => onChange(v), children: [_jsx(FormSelectOption, { value: "", label: "Any (scheduler)" }), orderedPods(status).map((pod) => (_jsx(FormSelectOption, { value: pod.id, label: `${pod.id}${pod.isLeader ? ' (leader)' : ''} · ${pod.state}`, isDisabled: pod.state === 'unavailable' }, pod.id)))] }), _jsx(FormHelperText, { children: _jsx(HelperText, { children: _jsx(HelperTextItem, { children: "Any: the leader places it. A pod: the leader sends the load there; the GPUs below are then that pod\u2019s." }) }) })] }));
}
