// The catalog editor: form values <-> a catalog entry, the server's validation errors
// mapped to the fields they name, and the idle TTL countdowns.
import { ApiError } from '../api/client';
import { splitArgs } from './loadForm';
export const EMPTY_CATALOG_FORM = {
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
};
const str = (v) => (v == null ? '' : String(v));
export function formFromModel(m) {
    const e = m.entry;
    if (!e)
        return { ...EMPTY_CATALOG_FORM, name: m.name };
    return {
        name: m.name,
        modelPath: e.modelPath,
        engine: e.engine ?? '',
        url: e.url ?? '',
        aliases: (e.aliases ?? []).join(', '),
        extraArgs: (e.extraArgs ?? []).join(' '),
        gpuIds: (e.gpuIds ?? []).join(', '),
        gpuMemoryLimit: str(e.gpuMemoryLimit),
        tensorParallelSize: str(e.tensorParallelSize ?? 1),
        sleepLevel: String(e.sleepLevel ?? 0),
        idleSleepSeconds: str(e.idleSleepSeconds),
        idleUnloadSeconds: str(e.idleUnloadSeconds),
        pinned: e.pinned ?? false,
        preload: e.preload ?? false,
    };
}
/** The entry to PUT, or the fields the operator must fix first (checked again by the server). */
export function entryFromForm(f) {
    const errors = {};
    if (!f.name.trim())
        errors.name = 'The served model name is required.';
    if (!f.modelPath.trim())
        errors.modelPath = 'Required: an HF id or folder (the served model for external).';
    const positive = (key) => {
        const text = f[key].trim();
        if (!text)
            return null;
        const n = Number(text);
        if (!Number.isFinite(n) || n <= 0)
            errors[key] = 'A number above 0, or empty.';
        return n;
    };
    const idleSleep = positive('idleSleepSeconds');
    const idleUnload = positive('idleUnloadSeconds');
    const memory = positive('gpuMemoryLimit');
    if (idleSleep !== null && f.sleepLevel === '0')
        errors.idleSleepSeconds = 'Needs sleep level 1 or 2.';
    const tp = Number(f.tensorParallelSize || '1');
    if (!Number.isInteger(tp) || tp < 1)
        errors.tensorParallelSize = 'A whole number, 1 or more.';
    let gpuIds = null;
    if (f.gpuIds.trim()) {
        gpuIds = f.gpuIds.split(/[\s,]+/).filter(Boolean).map(Number);
        if (gpuIds.some((g) => !Number.isInteger(g) || g < 0))
            errors.gpuIds = 'GPU indexes, e.g. "0, 1".';
    }
    if (f.engine === 'external' && !f.url.trim())
        errors.url = 'An external engine needs its server URL.';
    if (Object.keys(errors).length > 0)
        return { entry: null, errors };
    const entry = {
        modelPath: f.modelPath.trim(),
        aliases: f.aliases.split(',').map((a) => a.trim()).filter(Boolean),
        extraArgs: splitArgs(f.extraArgs),
        tensorParallelSize: tp,
        sleepLevel: Number(f.sleepLevel),
        pinned: f.pinned,
        preload: f.preload,
        ...(f.engine ? { engine: f.engine } : {}),
        ...(f.url.trim() ? { url: f.url.trim() } : {}),
        ...(gpuIds ? { gpuIds } : {}),
        ...(memory !== null ? { gpuMemoryLimit: memory } : {}),
        ...(idleSleep !== null ? { idleSleepSeconds: idleSleep } : {}),
        ...(idleUnload !== null ? { idleUnloadSeconds: idleUnload } : {}),
    };
    return { entry, errors };
}
const FIELDS = new Set(Object.keys(EMPTY_CATALOG_FORM));
/**
 * The server's refusal, per field: a 422 lists `{field, message}` pairs; a 400
 * `invalid_catalog_entry` reads "catalog entry 'x': field: message"; a 409 is about a name.
 * What names no field of the form stays general.
 */
export function serverFieldErrors(error) {
    if (!(error instanceof ApiError))
        return { fields: {}, general: error instanceof Error ? error.message : String(error) };
    const fields = {};
    const body = error.body;
    if (error.status === 422 && Array.isArray(body?.errors)) {
        const rest = [];
        for (const e of body.errors) {
            const field = (e.field ?? '').split('.')[0] ?? '';
            if (FIELDS.has(field))
                fields[field] = e.message ?? 'invalid';
            else
                rest.push(`${e.field}: ${e.message}`);
        }
        return { fields, general: rest.length ? rest.join('; ') : null };
    }
    const m = /^catalog entry '[^']*': (\w+): (.+)$/s.exec(error.message);
    if (m && m[1] && FIELDS.has(m[1])) {
        fields[m[1]] = m[2] ?? error.message;
        return { fields, general: null };
    }
    if (error.code === 'catalog_name_taken')
        return { fields: { aliases: error.message }, general: null };
    return { fields, general: error.message };
}
/**
 * The next idle action of an entry and when it is due, counted from its idle clock:
 * an active model sleeps (when it may) or unloads, a sleeping one unloads. None for a
 * pinned model, a model with no TTL, or no instance.
 */
export function idleCountdown(m) {
    const e = m.entry;
    if (!e || e.pinned || m.idleSeconds == null)
        return null;
    const left = (ttl) => Math.max(0, ttl - (m.idleSeconds ?? 0));
    if (m.state === 'active') {
        if ((e.sleepLevel ?? 0) > 0 && e.idleSleepSeconds)
            return { action: 'sleep', seconds: left(e.idleSleepSeconds) };
        if (e.idleUnloadSeconds)
            return { action: 'unload', seconds: left(e.idleUnloadSeconds) };
    }
    if (m.state === 'sleeping' && e.idleUnloadSeconds)
        return { action: 'unload', seconds: left(e.idleUnloadSeconds) };
    return null;
}
