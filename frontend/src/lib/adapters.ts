// The catalog page's LoRA adapters: rows grouped by base, what each button may do now,
// and the API's refusals in words.

import type { AdapterAction, AdapterPlacement, AdapterView } from '../api/adapters';
import type { CatalogModel } from '../api/catalog';
import { ApiError } from '../api/client';

export type AdapterRowState = AdapterView['state'] | 'invalid';

export interface AdapterRow {
  name: string;
  /** The base entry; null for an invalid entry (the API does not give it then). */
  base: string | null;
  adapterPath: string | null;
  aliases: string[];
  state: AdapterRowState;
  loadedOn: AdapterPlacement[];
  /** Why an invalid entry is invalid (the catalog's error, naming the field). */
  error: string | null;
}

/** An entry that did not validate has no entry to read `adapterOf` from: its error,
 * which names the field it failed on, is what tells an adapter apart. */
const ADAPTER_FIELD = /\badapter(Of|Path)\b|\badapter_config\.json\b/;

export function isInvalidAdapter(m: CatalogModel): boolean {
  return m.state === 'invalid' && m.entry == null && m.error != null && ADAPTER_FIELD.test(m.error);
}

/** Valid adapters (GET /api/v1/adapters) and invalid adapter entries (GET
 * /api/v1/catalog, with their reason), by base then name; invalid ones last. */
export function adapterRows(adapters: AdapterView[], catalog: CatalogModel[] | undefined): AdapterRow[] {
  const valid: AdapterRow[] = adapters.map((a) => ({
    name: a.name,
    base: a.base,
    adapterPath: a.adapterPath,
    aliases: a.aliases,
    state: a.state,
    loadedOn: a.loadedOn,
    error: null,
  }));
  valid.sort((a, b) => (a.base ?? '').localeCompare(b.base ?? '') || a.name.localeCompare(b.name));
  const known = new Set(adapters.map((a) => a.name));
  const invalid: AdapterRow[] = (catalog ?? [])
    .filter((m) => !known.has(m.name) && isInvalidAdapter(m))
    .map((m): AdapterRow => ({ name: m.name, base: null, adapterPath: null, aliases: [], state: 'invalid', loadedOn: [], error: m.error }))
    .sort((a, b) => a.name.localeCompare(b.name));
  return [...valid, ...invalid];
}

/** Where it is loaded, as the CLI prints it: `pod/instance` in a cluster, the instance alone on one node. */
export function placementLabel(p: AdapterPlacement): string {
  return p.podId ? `${p.podId}/${p.instanceId}` : p.instanceId;
}

export function inFlight(row: AdapterRow): number {
  return row.loadedOn.reduce((n, p) => n + p.inFlight, 0);
}

/** Whether the button may be pressed now, and if not, why (shown under it). */
export function actionBlocked(row: AdapterRow, action: AdapterAction): string | null {
  if (row.state === 'invalid') return 'the entry is invalid: fix it first';
  if (action === 'load') return row.state === 'active' ? 'already loaded' : null;
  if (row.state === 'unloaded') return 'not loaded';
  if (row.state === 'sleeping') return 'its base sleeps and keeps it';
  const busy = inFlight(row);
  return busy > 0 ? `serves ${busy} request${busy === 1 ? '' : 's'} now` : null;
}

/** The API's refusal of a load or unload, in words; the server's own detail kept. */
export function adapterActionError(name: string, action: AdapterAction, e: unknown): string {
  const detail = e instanceof Error ? e.message : String(e);
  if (!(e instanceof ApiError)) return `Could not ${action} ${name}: ${detail}`;
  switch (e.code) {
    case 'adapter_in_use':
      return `${name} serves requests now: nothing was unloaded. Try again once they finish.`;
    case 'adapter_not_found':
      return `There is no adapter entry named ${name} any more (deleted or now invalid).`;
    case 'adapter_slots_busy':
      return `Every LoRA slot of ${name}'s base serves requests now: ${detail}`;
    case 'adapter_load_failed':
      return `The engine could not load ${name}: ${detail}`;
    default:
      return `Could not ${action} ${name} (${e.status} ${e.code}): ${detail}`;
  }
}

/** The adapters an instance holds, by name, with their requests in flight there (its instance page). */
export function heldBy(adapters: AdapterView[], instanceId: string): Array<{ name: string; inFlight: number }> {
  return adapters
    .flatMap((a) => a.loadedOn.filter((p) => p.instanceId === instanceId).map((p) => ({ name: a.name, inFlight: p.inFlight })))
    .sort((a, b) => a.name.localeCompare(b.name));
}

export function heldText(held: Array<{ name: string; inFlight: number }>): string {
  return held.map((h) => (h.inFlight > 0 ? `${h.name} (${h.inFlight} in flight)` : h.name)).join(', ');
}
