import { describe, expect, it } from 'vitest';
import type { EnginesReport } from '../api/types';
import { engineChoice } from './engineChoice';

function report(vllmAvailable: boolean, defaultEngine: string): EnginesReport {
  return {
    vllm: {
      python: '/usr/bin/python3',
      found: vllmAvailable,
      available: vllmAvailable,
      version: vllmAvailable ? '0.32.0' : null,
      distribution: null,
      cpuBuild: false,
      device: 'cuda',
      supportsSleep: true,
      drainsOnStop: false,
      error: vllmAvailable ? null : 'vllm is not installed for this interpreter',
      description: '',
    },
    sim: { available: true, description: '' },
    defaultEngine,
  };
}

describe('engineChoice', () => {
  it('a node without vLLM whose default is vLLM starts on the simulated engine, saying why in one line', () => {
    const choice = engineChoice(report(false, 'vllm'), false);
    expect(choice.initial).toBe('sim');
    expect(choice.defaultLabel).toBe('Server default (vLLM, cannot run here)');
    expect(choice.vllmUnavailable).toBe('vLLM cannot run on this node: vllm is not installed for this interpreter.');
  });

  it('a runnable default stays the first choice', () => {
    expect(engineChoice(report(true, 'vllm'), false)).toEqual({
      defaultLabel: 'Server default (vLLM)',
      initial: 'default',
      vllmUnavailable: null,
    });
    expect(engineChoice(report(false, 'sim'), true).initial).toBe('default');
    expect(engineChoice(report(false, 'sim'), true).defaultLabel).toBe('Server default (simulated)');
  });
});
