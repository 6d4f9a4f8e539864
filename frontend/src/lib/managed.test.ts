import { describe, expect, it } from 'vitest';
import { managedText, unloadWarning } from './managed';

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
