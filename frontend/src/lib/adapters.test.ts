import { describe, expect, it } from 'vitest';
import type { AdapterView } from '../api/adapters';
import type { CatalogModel } from '../api/catalog';
import { ApiError } from '../api/client';
import { actionBlocked, adapterActionError, adapterRows, heldBy, heldText, isInvalidAdapter, placementLabel, type AdapterRow } from './adapters';

const adapter = (name: string, base: string, extra: Partial<AdapterView> = {}): AdapterView => ({
  name,
  base,
  adapterPath: `/adapters/${name}`,
  aliases: [],
  state: 'unloaded',
  loadedOn: [],
  ...extra,
});

const invalid = (name: string, error: string): CatalogModel => ({
  name,
  source: 'config',
  state: 'invalid',
  error,
  overridesConfig: false,
  instanceIds: [],
  entry: null,
});

describe('adapterRows', () => {
  it('lists adapters by base then name, then invalid adapter entries with their reason', () => {
    const catalog = [
      invalid('big', "catalog entry 'big': adapterPath: the adapter's rank 64 is greater than the base's maxLoraRank 16"),
      invalid('orphan', "catalog entry 'orphan': adapterOf: no catalog entry named 'nowhere'"),
      invalid('broken-base', "catalog entry 'broken-base': modelPath: field required"),
    ];
    const rows = adapterRows([adapter('sql', 'llama'), adapter('b', 'qwen'), adapter('a', 'qwen'), adapter('poem', 'llama')], catalog);
    expect(rows.map((r) => [r.name, r.base, r.state])).toEqual([
      ['poem', 'llama', 'unloaded'],
      ['sql', 'llama', 'unloaded'],
      ['a', 'qwen', 'unloaded'],
      ['b', 'qwen', 'unloaded'],
      ['big', null, 'invalid'],
      ['orphan', null, 'invalid'],
    ]);
    expect(rows[4]?.error).toContain('rank 64');
  });

  it('tells an invalid adapter entry from another invalid entry only by the field its error names', () => {
    expect(isInvalidAdapter(invalid('x', "catalog entry 'x': adapterOf: the base 'plain' has no loraSlots"))).toBe(true);
    expect(isInvalidAdapter(invalid('y', "catalog entry 'y': gpuIds: GPU 7 does not exist"))).toBe(false);
    expect(isInvalidAdapter({ ...invalid('z', 'adapterPath: x'), state: 'failed' })).toBe(false);
  });

  it('works before the catalog has answered', () => {
    expect(adapterRows([adapter('sql', 'llama')], undefined).map((r) => r.name)).toEqual(['sql']);
  });
});

describe('placementLabel', () => {
  it('names the pod in a cluster, the instance alone on one node', () => {
    expect(placementLabel({ podId: 'pod-a', instanceId: '3f2a', inFlight: 0, sleeping: false })).toBe('pod-a/3f2a');
    expect(placementLabel({ podId: null, instanceId: '3f2a', inFlight: 0, sleeping: false })).toBe('3f2a');
  });
});

describe('actionBlocked', () => {
  const row: AdapterRow = { name: 'sql', base: 'llama', adapterPath: '/a/sql', aliases: [], state: 'unloaded', loadedOn: [], error: null };
  const place = (inFlight: number, sleeping = false) => ({ podId: null, instanceId: 'i1', inFlight, sleeping });

  it('offers load for an unloaded adapter and not unload', () => {
    expect(actionBlocked(row, 'load')).toBeNull();
    expect(actionBlocked(row, 'unload')).toBe('not loaded');
  });

  it('offers unload for an idle active adapter, not while it serves requests', () => {
    const active = { ...row, state: 'active' as const, loadedOn: [place(0)] };
    expect(actionBlocked(active, 'load')).toBe('already loaded');
    expect(actionBlocked(active, 'unload')).toBeNull();
    expect(actionBlocked({ ...active, loadedOn: [place(1), place(2)] }, 'unload')).toBe('serves 3 requests now');
    expect(actionBlocked({ ...active, loadedOn: [place(1)] }, 'unload')).toBe('serves 1 request now');
  });

  it('lets a sleeping base keep its adapter, and refuses both on an invalid entry', () => {
    const sleeping = { ...row, state: 'sleeping' as const, loadedOn: [place(0, true)] };
    expect(actionBlocked(sleeping, 'unload')).toBe('its base sleeps and keeps it');
    expect(actionBlocked(sleeping, 'load')).toBeNull();
    const bad = { ...row, state: 'invalid' as const };
    expect(actionBlocked(bad, 'load')).toMatch(/invalid/);
    expect(actionBlocked(bad, 'unload')).toMatch(/invalid/);
  });
});

describe('adapterActionError', () => {
  it('says what each refusal of the API means, keeping the engine reason', () => {
    expect(adapterActionError('sql', 'unload', new ApiError(409, 'adapter_in_use', 'in use'))).toBe(
      'sql serves requests now: nothing was unloaded. Try again once they finish.',
    );
    expect(adapterActionError('sql', 'load', new ApiError(404, 'adapter_not_found', "no LoRA adapter entry named 'sql'"))).toMatch(
      /no adapter entry named sql/,
    );
    expect(adapterActionError('sql', 'load', new ApiError(404, 'adapter_load_failed', 'No adapter found for /x'))).toBe(
      'The engine could not load sql: No adapter found for /x',
    );
    expect(adapterActionError('sql', 'load', new ApiError(403, 'forbidden', 'admin role required'))).toBe(
      'Could not load sql (403 forbidden): admin role required',
    );
    expect(adapterActionError('sql', 'load', new Error('boom'))).toBe('Could not load sql: boom');
  });
});

describe('heldBy', () => {
  it('names the adapters one instance holds, with their requests in flight there', () => {
    const at = (instanceId: string, inFlight: number) => ({ podId: null, instanceId, inFlight, sleeping: false });
    const adapters = [
      adapter('sql', 'llama', { state: 'active', loadedOn: [at('i1', 2), at('i2', 0)] }),
      adapter('poem', 'llama', { state: 'active', loadedOn: [at('i1', 0)] }),
      adapter('chat', 'llama', { state: 'active', loadedOn: [at('i2', 1)] }),
    ];
    expect(heldText(heldBy(adapters, 'i1'))).toBe('poem, sql (2 in flight)');
    expect(heldText(heldBy(adapters, 'i2'))).toBe('chat (1 in flight), sql');
    expect(heldBy(adapters, 'i3')).toEqual([]);
  });
});
