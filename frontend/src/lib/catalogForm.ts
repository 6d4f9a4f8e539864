// The catalog editor: form values <-> a catalog entry, the server's validation errors
// mapped to the fields they name, and the idle TTL countdowns.

import { ApiError } from '../api/client';
import type { CatalogEntry, CatalogModel } from '../api/catalog';
import { splitArgs } from './loadForm';

export interface CatalogForm {
  name: string;
  modelPath: string;
  engine: '' | 'vllm' | 'sim' | 'external';
  url: string;
  aliases: string;
  extraArgs: string;
  gpuIds: string;
  gpuMemoryLimit: string;
  tensorParallelSize: string;
  sleepLevel: '0' | '1' | '2';
  idleSleepSeconds: string;
  idleUnloadSeconds: string;
  pinned: boolean;
  preload: boolean;
  warmup: boolean;
  warmupPrompt: string;
  loraSlots: string;
  maxLoraRank: string;
  adapterOf: string;
  adapterPath: string;
}

export type FieldErrors = Partial<Record<keyof CatalogForm, string>>;

export const EMPTY_CATALOG_FORM: CatalogForm = {
  name: '',
  modelPath: '',
  engine: '',
  url: '',
  aliases: '',
  extraArgs: '',
  gpuIds: '',
  gpuMemoryLimit: '',
  tensorParallelSize: '1',
  sleepLevel: '0',
  idleSleepSeconds: '',
  idleUnloadSeconds: '',
  pinned: false,
  preload: false,
  warmup: false,
  warmupPrompt: '',
  loraSlots: '',
  maxLoraRank: '',
  adapterOf: '',
  adapterPath: '',
};

const str = (v: number | null | undefined): string => (v == null ? '' : String(v));

export function formFromModel(m: CatalogModel): CatalogForm {
  const e = m.entry;
  if (!e) return { ...EMPTY_CATALOG_FORM, name: m.name };
  return {
    name: m.name,
    modelPath: e.modelPath ?? '',
    engine: e.engine ?? '',
    url: e.url ?? '',
    aliases: (e.aliases ?? []).join(', '),
    extraArgs: (e.extraArgs ?? []).join(' '),
    gpuIds: (e.gpuIds ?? []).join(', '),
    gpuMemoryLimit: str(e.gpuMemoryLimit),
    tensorParallelSize: str(e.tensorParallelSize ?? 1),
    sleepLevel: String(e.sleepLevel ?? 0) as CatalogForm['sleepLevel'],
    idleSleepSeconds: str(e.idleSleepSeconds),
    idleUnloadSeconds: str(e.idleUnloadSeconds),
    pinned: e.pinned ?? false,
    preload: e.preload ?? false,
    warmup: e.warmup ?? false,
    warmupPrompt: e.warmupPrompt ?? '',
    loraSlots: str(e.loraSlots),
    maxLoraRank: str(e.maxLoraRank),
    adapterOf: e.adapterOf ?? '',
    adapterPath: e.adapterPath ?? '',
  };
}

/** What the catalog table's Model column says of an entry: an adapter by its base. */
export function entrySummary(e: CatalogEntry): string {
  if (e.adapterOf) return `adapter of ${e.adapterOf}${e.adapterPath ? ` · ${e.adapterPath}` : ''}`;
  const slots = e.loraSlots ? ` · ${e.loraSlots} LoRA slot${e.loraSlots === 1 ? '' : 's'}` : '';
  return `${e.modelPath ?? ''} · ${e.engine ?? 'default engine'}${slots}`;
}

const splitList = (text: string): string[] => text.split(',').map((a) => a.trim()).filter(Boolean);

/**
 * A LoRA adapter entry: it takes no field but its base, its folder and aliases (it runs in
 * its base's instances and follows the base's settings), so the rest of the form is unused.
 */
function adapterFromForm(f: CatalogForm): { entry: CatalogEntry | null; errors: FieldErrors } {
  const errors: FieldErrors = {};
  if (!f.name.trim()) errors.name = 'The served model name is required.';
  if (!f.adapterPath.trim()) errors.adapterPath = "Required for an adapter: the folder with its adapter_config.json.";
  if (f.modelPath.trim()) errors.modelPath = "Leave empty for an adapter: it runs in its base's instances.";
  if (f.loraSlots.trim()) errors.loraSlots = 'Only for a base model, not an adapter.';
  if (Object.keys(errors).length > 0) return { entry: null, errors };
  return { entry: { adapterOf: f.adapterOf.trim(), adapterPath: f.adapterPath.trim(), aliases: splitList(f.aliases) }, errors };
}

/** The entry to PUT, or the fields the operator must fix first (checked again by the server). */
export function entryFromForm(f: CatalogForm): { entry: CatalogEntry | null; errors: FieldErrors } {
  if (f.adapterOf.trim()) return adapterFromForm(f);
  const errors: FieldErrors = {};
  if (!f.name.trim()) errors.name = 'The served model name is required.';
  if (!f.modelPath.trim()) errors.modelPath = 'Required: an HF id or folder (the served model for external).';
  if (f.adapterPath.trim()) errors.adapterOf = 'An adapter path needs the base entry it is an adapter of.';
  const positive = (key: 'idleSleepSeconds' | 'idleUnloadSeconds' | 'gpuMemoryLimit'): number | null => {
    const text = f[key].trim();
    if (!text) return null;
    const n = Number(text);
    if (!Number.isFinite(n) || n <= 0) errors[key] = 'A number above 0, or empty.';
    return n;
  };
  const idleSleep = positive('idleSleepSeconds');
  const idleUnload = positive('idleUnloadSeconds');
  const memory = positive('gpuMemoryLimit');
  if (idleSleep !== null && f.sleepLevel === '0') errors.idleSleepSeconds = 'Needs sleep level 1 or 2.';
  const tp = Number(f.tensorParallelSize || '1');
  if (!Number.isInteger(tp) || tp < 1) errors.tensorParallelSize = 'A whole number, 1 or more.';
  let gpuIds: number[] | null = null;
  if (f.gpuIds.trim()) {
    gpuIds = f.gpuIds.split(/[\s,]+/).filter(Boolean).map(Number);
    if (gpuIds.some((g) => !Number.isInteger(g) || g < 0)) errors.gpuIds = 'GPU indexes, e.g. "0, 1".';
  }
  if (f.warmup && f.sleepLevel === '0') errors.warmup = 'Needs sleep level 1 or 2 (a warmup follows a wake).';
  if (f.warmupPrompt && !f.warmup) errors.warmupPrompt = 'Only used with warmup on.';
  if (f.engine === 'external' && !f.url.trim()) errors.url = 'An external engine needs its server URL.';
  const whole = (key: 'loraSlots' | 'maxLoraRank'): number | null => {
    const text = f[key].trim();
    if (!text) return null;
    const n = Number(text);
    if (!Number.isInteger(n) || n < 1) errors[key] = 'A whole number, 1 or more, or empty.';
    return n;
  };
  const loraSlots = whole('loraSlots');
  const maxLoraRank = whole('maxLoraRank');
  if (maxLoraRank !== null && loraSlots === null) errors.maxLoraRank = 'Needs LoRA slots.';
  if (Object.keys(errors).length > 0) return { entry: null, errors };
  const entry: CatalogEntry = {
    modelPath: f.modelPath.trim(),
    aliases: splitList(f.aliases),
    extraArgs: splitArgs(f.extraArgs),
    tensorParallelSize: tp,
    sleepLevel: Number(f.sleepLevel) as 0 | 1 | 2,
    pinned: f.pinned,
    preload: f.preload,
    warmup: f.warmup,
    ...(f.warmupPrompt ? { warmupPrompt: f.warmupPrompt } : {}),
    ...(f.engine ? { engine: f.engine } : {}),
    ...(f.url.trim() ? { url: f.url.trim() } : {}),
    ...(gpuIds ? { gpuIds } : {}),
    ...(memory !== null ? { gpuMemoryLimit: memory } : {}),
    ...(idleSleep !== null ? { idleSleepSeconds: idleSleep } : {}),
    ...(idleUnload !== null ? { idleUnloadSeconds: idleUnload } : {}),
    ...(loraSlots !== null ? { loraSlots } : {}),
    ...(maxLoraRank !== null ? { maxLoraRank } : {}),
  };
  return { entry, errors };
}

const FIELDS = new Set<string>(Object.keys(EMPTY_CATALOG_FORM));

/**
 * The server's refusal, per field: a 422 lists `{field, message}` pairs; a 400
 * `invalid_catalog_entry` reads "catalog entry 'x': field: message"; a 409 is about a name.
 * What names no field of the form stays general.
 */
export function serverFieldErrors(error: unknown): { fields: FieldErrors; general: string | null } {
  if (!(error instanceof ApiError)) return { fields: {}, general: error instanceof Error ? error.message : String(error) };
  const fields: FieldErrors = {};
  const body = error.body as { errors?: Array<{ field?: string; message?: string }> } | null;
  if (error.status === 422 && Array.isArray(body?.errors)) {
    const rest: string[] = [];
    for (const e of body.errors) {
      const field = (e.field ?? '').split('.')[0] ?? '';
      if (FIELDS.has(field)) fields[field as keyof CatalogForm] = e.message ?? 'invalid';
      else rest.push(`${e.field}: ${e.message}`);
    }
    return { fields, general: rest.length ? rest.join('; ') : null };
  }
  const m = /^catalog entry '[^']*': (\w+): (.+)$/s.exec(error.message);
  if (m && m[1] && FIELDS.has(m[1])) {
    fields[m[1] as keyof CatalogForm] = m[2] ?? error.message;
    return { fields, general: null };
  }
  if (error.code === 'catalog_name_taken') return { fields: { aliases: error.message }, general: null };
  return { fields, general: error.message };
}

export interface Countdown {
  action: 'sleep' | 'unload';
  /** Seconds left; 0 when due (the idle loop acts on its next tick). */
  seconds: number;
}

/**
 * The next idle action of an entry and when it is due, counted from its idle clock:
 * an active model sleeps (when it may) or unloads, a sleeping one unloads. None for a
 * pinned model, a model with no TTL, or no instance.
 */
export function idleCountdown(m: CatalogModel): Countdown | null {
  const e = m.entry;
  if (!e || e.pinned || m.idleSeconds == null) return null;
  const left = (ttl: number): number => Math.max(0, ttl - (m.idleSeconds ?? 0));
  if (m.state === 'active') {
    if ((e.sleepLevel ?? 0) > 0 && e.idleSleepSeconds) return { action: 'sleep', seconds: left(e.idleSleepSeconds) };
    if (e.idleUnloadSeconds) return { action: 'unload', seconds: left(e.idleUnloadSeconds) };
  }
  if (m.state === 'sleeping' && e.idleUnloadSeconds) return { action: 'unload', seconds: left(e.idleUnloadSeconds) };
  return null;
}
