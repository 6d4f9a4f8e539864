import { useEffect, useSyncExternalStore } from 'react';
import { useClusterStatus } from '../api/queries';
import type { ModelInstance } from '../api/types';
import { useCanMutateIfKnown } from '../auth/AuthContext';
import type { InstanceAction } from './InstanceActions';
import { MoveModal } from './MoveModal';

// The open move dialog lives outside the table row that opened it: a move ends by
// unloading the source instance, whose row (and anything rendered in it) then goes.
type Opened = { inst: ModelInstance; podId: string } | null;
let opened: Opened = null;
const listeners = new Set<() => void>();

function setOpened(value: Opened): void {
  opened = value;
  listeners.forEach((l) => l());
}

function subscribe(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Move, as a row action of the models table: to another pod, or (a single node too)
 *  to other GPUs of its own. Null for read-only users and without a leader; the dialog
 *  is shown by <MoveDialogHost/>, which the page renders once. */
export function useMoveAction(inst: ModelInstance): InstanceAction | null {
  const canMutate = useCanMutateIfKnown();
  const s = useClusterStatus().data;
  if (!canMutate || !s || s.leader === null) return null;
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
  if (!open || !s) return null;
  return <MoveModal inst={open.inst} podId={open.podId} status={s} onClose={() => setOpened(null)} />;
}
