import type { ManagedBy, ModelInstance } from '../api/types';

/** The label of an instance the applied preset or the catalog manages. */
export function managedText(m: ManagedBy): string {
  return m.kind === 'preset' ? `preset ${m.name}` : 'catalog';
}

/** What the unload dialog warns: the unload is undone (null: nothing manages it). */
export function unloadWarning(m: ManagedBy | null | undefined): string | null {
  if (!m) return null;
  if (m.kind === 'preset') {
    return `Preset ${m.name} is applied and declares this model: the leader loads it again while the preset stays applied.`;
  }
  return `${m.name} is a catalog model: the next request for it starts it again.`;
}

/** ``next`` (from a status event or an action's reply, which the server sends without
 * ``managedBy``) keeping the steward the instance list last gave ``prev``: a status change
 * does not change who manages an instance, and the next list refetch sets it afresh. */
export function keepSteward(next: ModelInstance, prev: ModelInstance | undefined): ModelInstance {
  if (next.managedBy || !prev?.managedBy) return next;
  return { ...next, managedBy: prev.managedBy };
}
