import { describe, expect, it } from 'vitest';
import type { ModelInstance } from '../api/types';
import { keepSteward, managedText, unloadWarning } from './managed';

describe('managed instances', () => {
  it('labels a preset with its name and the catalog by kind', () => {
    expect(managedText({ kind: 'preset', name: 'prod' })).toBe('preset prod');
    expect(managedText({ kind: 'catalog', name: 'chat' })).toBe('catalog');
  });

  it('warns that the leader restores a preset model', () => {
    expect(unloadWarning({ kind: 'preset', name: 'prod' })).toMatch(/prod.*leader loads it again/);
  });

  it('warns that the next request restarts a catalog model', () => {
    expect(unloadWarning({ kind: 'catalog', name: 'chat' })).toMatch(/chat.*next request.*starts it again/);
  });

  it('has nothing to say about a hand-loaded instance', () => {
    expect(unloadWarning(null)).toBeNull();
    expect(unloadWarning(undefined)).toBeNull();
  });
});

describe('keepSteward', () => {
  const inst = { id: 'a', status: 'active' } as ModelInstance;
  const managed = { ...inst, managedBy: { kind: 'catalog', name: 'chat' } } as ModelInstance;

  it('keeps the steward the list gave when an event carries none', () => {
    const next = { ...inst, status: 'sleeping', managedBy: null } as ModelInstance;
    expect(keepSteward(next, managed)).toEqual({ ...next, managedBy: managed.managedBy });
  });

  it('takes a steward the update carries, and leaves an unmanaged instance alone', () => {
    const preset = { ...inst, managedBy: { kind: 'preset', name: 'prod' } } as ModelInstance;
    expect(keepSteward(preset, managed)).toBe(preset);
    expect(keepSteward(inst, undefined)).toBe(inst);
    expect(keepSteward(inst, { ...inst, managedBy: null })).toBe(inst);
  });
});
