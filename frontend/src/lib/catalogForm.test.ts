import { describe, expect, it } from 'vitest';
import { ApiError } from '../api/client';
import type { CatalogModel } from '../api/catalog';
import { EMPTY_CATALOG_FORM, entryFromForm, entrySummary, formFromModel, idleCountdown, serverFieldErrors } from './catalogForm';

const model = (over: Partial<CatalogModel>, entry: CatalogModel['entry'] = { modelPath: 'qwen' }): CatalogModel => ({
  name: 'qwen-chat',
  source: 'api',
  state: 'active',
  error: null,
  overridesConfig: false,
  instanceIds: ['i'],
  entry,
  idleSeconds: 40,
  ...over,
});

describe('catalog form', () => {
  it('round-trips an entry through the form', () => {
    const m = model({}, { modelPath: 'qwen', engine: 'sim', aliases: ['a', 'b'], sleepLevel: 1, idleSleepSeconds: 60, pinned: true });
    const { entry, errors } = entryFromForm(formFromModel(m));
    expect(errors).toEqual({});
    expect(entry).toMatchObject({ modelPath: 'qwen', engine: 'sim', aliases: ['a', 'b'], sleepLevel: 1, idleSleepSeconds: 60, pinned: true });
  });

  it('names each field the operator must fix', () => {
    const { entry, errors } = entryFromForm({
      ...EMPTY_CATALOG_FORM,
      idleSleepSeconds: '30',
      idleUnloadSeconds: '-1',
      gpuIds: '0, x',
      engine: 'external',
    });
    expect(entry).toBeNull();
    expect(Object.keys(errors).sort()).toEqual(['gpuIds', 'idleSleepSeconds', 'idleUnloadSeconds', 'modelPath', 'name', 'url']);
    expect(errors.idleSleepSeconds).toMatch(/sleep level/);
  });

  it("maps the server's refusals to fields", () => {
    const e422 = new ApiError(422, 'validation_error', 'invalid request', {
      errors: [
        { field: 'idleSleepSeconds', message: 'Input should be greater than 0' },
        { field: 'bogus', message: 'Extra inputs are not permitted' },
      ],
    });
    expect(serverFieldErrors(e422)).toEqual({
      fields: { idleSleepSeconds: 'Input should be greater than 0' },
      general: 'bogus: Extra inputs are not permitted',
    });
    const e400 = new ApiError(400, 'invalid_catalog_entry', "catalog entry 'x': url: engine external needs the server's url");
    expect(serverFieldErrors(e400)).toEqual({ fields: { url: "engine external needs the server's url" }, general: null });
    expect(serverFieldErrors(new ApiError(500, 'internal', 'boom')).general).toBe('boom');
  });
});

describe('LoRA adapters and their bases', () => {
  // As GET /api/v1/catalog lists an adapter: modelPath is "" (it runs in its base).
  const adapter = { modelPath: '', engine: null, adapterOf: 'llama', adapterPath: '/models/adapters/sql', aliases: ['sql'], loraSlots: null };

  it('summarises an adapter by its base, a base by its slots', () => {
    expect(entrySummary(adapter)).toBe('adapter of llama · /models/adapters/sql');
    expect(entrySummary({ adapterOf: 'llama' })).toBe('adapter of llama');
    expect(entrySummary({ modelPath: 'meta-llama/Llama-3.1-8B', loraSlots: 4 })).toBe('meta-llama/Llama-3.1-8B · default engine · 4 LoRA slots');
    expect(entrySummary({ modelPath: 'qwen', engine: 'sim' })).toBe('qwen · sim');
  });

  it('round-trips an adapter as an adapter: base, folder and aliases only', () => {
    const form = formFromModel(model({ name: 'sql-helper' }, adapter));
    expect(form).toMatchObject({ modelPath: '', adapterOf: 'llama', adapterPath: '/models/adapters/sql', aliases: 'sql' });
    const { entry, errors } = entryFromForm(form);
    expect(errors).toEqual({});
    expect(entry).toEqual({ adapterOf: 'llama', adapterPath: '/models/adapters/sql', aliases: ['sql'] });
  });

  it("keeps a base's LoRA settings through an edit", () => {
    const base = model({ name: 'llama' }, { modelPath: 'meta-llama/Llama-3.1-8B', loraSlots: 4, maxLoraRank: 32 });
    const { entry, errors } = entryFromForm(formFromModel(base));
    expect(errors).toEqual({});
    expect(entry).toMatchObject({ modelPath: 'meta-llama/Llama-3.1-8B', loraSlots: 4, maxLoraRank: 32 });
    expect(entry).not.toHaveProperty('adapterOf');
  });

  it('names what an adapter or a base must fix', () => {
    const bad = entryFromForm({ ...EMPTY_CATALOG_FORM, name: 'a', adapterOf: 'llama', modelPath: 'x', loraSlots: '2' });
    expect(bad.entry).toBeNull();
    expect(Object.keys(bad.errors).sort()).toEqual(['adapterPath', 'loraSlots', 'modelPath']);
    const orphan = entryFromForm({ ...EMPTY_CATALOG_FORM, name: 'a', modelPath: 'x', adapterPath: '/a', maxLoraRank: '0' });
    expect(orphan.entry).toBeNull();
    expect(Object.keys(orphan.errors).sort()).toEqual(['adapterOf', 'maxLoraRank']);
    const rankAlone = entryFromForm({ ...EMPTY_CATALOG_FORM, name: 'a', modelPath: 'x', maxLoraRank: '32' });
    expect(rankAlone.errors).toEqual({ maxLoraRank: 'Needs LoRA slots.' });
  });
});

describe('idle countdown', () => {
  it('counts down to sleep, then to unload; never for a pinned model', () => {
    const entry = { modelPath: 'q', sleepLevel: 1 as const, idleSleepSeconds: 60, idleUnloadSeconds: 300 };
    expect(idleCountdown(model({}, entry))).toEqual({ action: 'sleep', seconds: 20 });
    expect(idleCountdown(model({ state: 'sleeping', idleSeconds: 100 }, entry))).toEqual({ action: 'unload', seconds: 200 });
    expect(idleCountdown(model({ idleSeconds: 500 }, { ...entry, sleepLevel: 0 }))).toEqual({ action: 'unload', seconds: 0 });
    expect(idleCountdown(model({}, { ...entry, pinned: true }))).toBeNull();
    expect(idleCountdown(model({ state: 'unloaded', idleSeconds: null }, entry))).toBeNull();
    expect(idleCountdown(model({}, { modelPath: 'q' }))).toBeNull();
  });
});
