// The preset editor's model: form rows <-> the PUT body. Only what JSON cannot
// carry is checked here (a number that is not one, an unterminated quote); the
// rest is the server's to judge, and its 422 is shown at the field it names.
import { splitArgs } from './loadForm';
export const EMPTY_PRESET_MODEL = {
    modelPath: '',
    servedModelName: '',
    engine: 'default',
    replicas: '1',
    gpuType: '',
    minVramGiB: '',
    tensorParallelSize: '1',
    sleepLevel: '0',
    pinned: false,
    extraArgs: '',
};
/** Quotes an argv token back for the one-line editor (what splitArgs reads). */
function quote(arg) {
    return /^[A-Za-z0-9_./:=,@%+-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}
export function toForm(m) {
    return {
        modelPath: m.modelPath,
        servedModelName: m.servedModelName,
        engine: m.engine ?? 'default',
        replicas: String(m.replicas ?? 1),
        gpuType: m.gpuType ?? '',
        minVramGiB: m.minVramGiB == null ? '' : String(m.minVramGiB),
        tensorParallelSize: String(m.tensorParallelSize ?? 1),
        sleepLevel: String(m.sleepLevel ?? 0),
        pinned: m.pinned ?? false,
        extraArgs: (m.extraArgs ?? []).map(quote).join(' '),
    };
}
function integer(text, field, errors) {
    const n = Number(text);
    if (text.trim() === '' || !Number.isInteger(n)) {
        errors[field] = 'A whole number.';
        return undefined;
    }
    return n;
}
export function toBody(rows) {
    const errors = {};
    const models = rows.map((r, i) => {
        const at = (f) => `models.${i}.${f}`;
        const m = {
            modelPath: r.modelPath.trim(),
            servedModelName: r.servedModelName.trim(),
            replicas: integer(r.replicas, at('replicas'), errors) ?? 0,
            tensorParallelSize: integer(r.tensorParallelSize, at('tensorParallelSize'), errors) ?? 1,
            sleepLevel: Number(r.sleepLevel),
            pinned: r.pinned,
            extraArgs: [],
        };
        if (r.engine !== 'default')
            m.engine = r.engine;
        if (r.gpuType.trim())
            m.gpuType = r.gpuType.trim();
        if (r.minVramGiB.trim()) {
            const v = Number(r.minVramGiB);
            if (Number.isFinite(v))
                m.minVramGiB = v;
            else
                errors[at('minVramGiB')] = 'GiB, a number.';
        }
        try {
            m.extraArgs = splitArgs(r.extraArgs);
        }
        catch (e) {
            errors[at('extraArgs')] = e.message;
        }
        return m;
    });
    return { body: Object.keys(errors).length > 0 ? null : { models }, errors };
}
/** Preset names the server takes (its NAME_PATTERN): a URL segment without escaping. */
export const PRESET_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** The JSON editor's text: `{"models": [...]}` (what PUT takes) or the bare list.
 *  The entries are sent as written: the server judges them (an unknown field is a 422). */
export function parseModelsJson(text) {
    let value;
    try {
        value = JSON.parse(text);
    }
    catch (e) {
        return { models: null, error: `Not JSON: ${e.message}` };
    }
    const list = Array.isArray(value) ? value : value?.models;
    if (!Array.isArray(list) || !list.every((m) => typeof m === 'object' && m !== null && !Array.isArray(m))) {
        return { models: null, error: 'Expected {"models": [{...}, ...]} (or the list itself).' };
    }
    return { models: list, error: null };
}
