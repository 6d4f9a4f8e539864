import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, Button, Checkbox, Content, Form, FormGroup, FormHelperText, FormSelect, FormSelectOption, HelperText, HelperTextItem, Modal, ModalBody, ModalFooter, ModalHeader, } from '@patternfly/react-core';
import { useQueryClient } from '@tanstack/react-query';
import { useEffect, useState } from 'react';
import { keys, useMove, useStartMove } from '../api/queries';
import { orderedPods } from '../lib/cluster';
import { formatBytes } from '../lib/format';
import { moveFinished } from '../lib/moves';
import { MoveSteps } from './MoveSteps';
/** The pod to offer first: another healthy pod (a move to the same pod needs GPUs). */
export function defaultTarget(status, from) {
    const others = orderedPods(status).filter((p) => p.id !== from && p.state === 'healthy');
    return others[0]?.id ?? from;
}
/** Follows a move that was started (or opened from the moves list) every second. */
export function MoveProgressModal({ moveId, onClose }) {
    const move = useMove(moveId);
    const qc = useQueryClient();
    const finished = moveFinished(move.data);
    useEffect(() => {
        // The end of a move changes the lists behind the dialog at once, not at their next poll.
        if (!finished)
            return;
        void qc.invalidateQueries({ queryKey: keys.moves, exact: true });
        void qc.invalidateQueries({ queryKey: keys.cluster });
        void qc.invalidateQueries({ queryKey: keys.instances });
    }, [finished, qc]);
    return (_jsxs(Modal, { isOpen: true, variant: "large", onClose: onClose, "aria-labelledby": "move-title", children: [_jsx(ModalHeader, { title: `Move ${move.data?.model ?? moveId}`, labelId: "move-title" }), _jsxs(ModalBody, { children: [move.data && _jsx(MoveSteps, { move: move.data }), move.isError && _jsx(Alert, { isInline: true, variant: "danger", title: move.error.message })] }), _jsx(ModalFooter, { children: _jsx(Button, { variant: finished ? 'primary' : 'link', onClick: onClose, children: "Close" }) })] }));
}
/**
 * Move an instance to another pod or to other GPUs of its own: pick the target, POST
 * the move (202), then follow its steps live. Closing the dialog does not stop it.
 */
export function MoveModal({ inst, podId, status, onClose, }) {
    const [target, setTarget] = useState(() => defaultTarget(status, podId));
    const [gpuIds, setGpuIds] = useState([]);
    const start = useStartMove();
    const pod = status.pods.find((p) => p.id === target);
    const samePod = target === podId;
    const tp = inst.tensorParallelSize;
    const gpuError = gpuIds.length > 0 && gpuIds.length !== tp
        ? `Tensor parallel size ${tp}: choose exactly ${tp} GPU(s), or none.`
        : samePod && gpuIds.length === 0
            ? 'The same pod: choose the GPUs to move to.'
            : undefined;
    if (start.data)
        return _jsx(MoveProgressModal, { moveId: start.data.id, onClose: onClose });
    return (_jsxs(Modal, { isOpen: true, variant: "medium", onClose: onClose, "aria-labelledby": "move-start-title", children: [_jsx(ModalHeader, { title: `Move ${inst.servedModelName}`, labelId: "move-start-title" }), _jsxs(ModalBody, { children: [_jsxs(Content, { component: "p", children: ["A blue-green move: the new instance starts on the target, traffic switches to it, then the current one (on pod", ' ', podId, ", ", inst.gpuIds.length ? `GPU ${inst.gpuIds.join(', ')}` : 'CPU', ") drains and is unloaded. No request fails; if the target cannot start, the current instance keeps serving."] }), _jsxs(Form, { id: "move-form", className: "sz-mt-md", onSubmit: (e) => {
                            e.preventDefault();
                            if (gpuError)
                                return;
                            start.mutate({ instanceId: inst.id, targetPodId: target, ...(gpuIds.length ? { gpuIds: [...gpuIds].sort((a, b) => a - b) } : {}) });
                        }, children: [_jsx(FormGroup, { label: "Target pod", fieldId: "move-target", children: _jsx(FormSelect, { id: "move-target", value: target, onChange: (_e, v) => {
                                        setTarget(v);
                                        setGpuIds([]);
                                        start.reset();
                                    }, children: orderedPods(status).map((p) => (_jsx(FormSelectOption, { value: p.id, label: `${p.id}${p.id === podId ? ' (its pod: other GPUs)' : ''} · ${p.state}`, isDisabled: p.state === 'unavailable' }, p.id))) }) }), _jsxs(FormGroup, { label: "GPUs on the target", fieldId: "move-gpus", role: "group", isInline: true, children: [(pod?.gpus ?? []).length === 0 && _jsxs("span", { children: ["No GPUs on pod ", target, "."] }), (pod?.gpus ?? []).map((g) => (_jsx(Checkbox, { id: `move-gpu-${g.index}`, label: `GPU ${g.index} · ${g.name} · ${formatBytes(g.freeBytes)} free`, isChecked: gpuIds.includes(g.index), onChange: (_e, on) => {
                                            setGpuIds((ids) => (on ? [...ids, g.index] : ids.filter((i) => i !== g.index)));
                                            start.reset();
                                        } }, g.index))), _jsx(FormHelperText, { children: _jsx(HelperText, { children: _jsx(HelperTextItem, { variant: gpuError ? 'error' : 'default', children: gpuError ?? 'None checked: the target pod’s ledger places it.' }) }) })] })] }), start.error && (_jsx(Alert, { isInline: true, variant: "danger", title: "The move was refused", className: "sz-mt-md", "data-testid": "move-error", children: start.error.message }))] }), _jsxs(ModalFooter, { children: [_jsx(Button, { type: "submit", form: "move-form", variant: "primary", isLoading: start.isPending, isDisabled: start.isPending || gpuError !== undefined, children: "Move" }), _jsx(Button, { variant: "link", onClick: onClose, children: "Cancel" })] })] }));
}
