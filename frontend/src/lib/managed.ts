import type { ManagedBy } from '../api/types';

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
