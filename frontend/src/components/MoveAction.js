import { jsx as _jsx } from "react/jsx-runtime";
import { useEffect, useSyncExternalStore } from 'react';
import { useClusterStatus } from '../api/queries';
import { useCanMutateIfKnown } from '../auth/AuthContext';
import { MoveModal } from './MoveModal';
let opened = null;
const listeners = new Set();
function setOpened(value) {
    opened = value;
    listeners.forEach((l) => l());
}
function subscribe(listener) {
    listeners.add(listener);
    return () => listeners.delete(listener);
}
/** Move, as a row action of the models table: to another pod, or (a single node too)
 *  to other GPUs of its own. Null for read-only users and without a leader; the dialog
 *  is shown by <MoveDialogHost/>, which the page renders once. */
export function useMoveAction(inst) {
    const canMutate = useCanMutateIfKnown();
    const s = useClusterStatus().data;
    if (!canMutate || !s || s.leader === null)
        return null;
    // The pod's own instances may come without podId (its event stream): they are its.
    const podId = inst.podId ?? s.podId ?? s.leader;
    return {
        key: 'move',
        label: 'Move',
        disabledReason: inst.status !== 'active' ? `Only an active instance can move (this one is ${inst.status}).` : null,
        run: () => setOpened({ inst, podId }),
    };
}
export function MoveDialogHost() {
    const open = useSyncExternalStore(subscribe, () => opened);
    useEffect(() => () => setOpened(null), []); // leaving the page closes it (the move goes on)
    const s = useClusterStatus().data;
    if (!open || !s)
        return null;
    return _jsx(MoveModal, { inst: open.inst, podId: open.podId, status: s, onClose: () => setOpened(null) });
}
