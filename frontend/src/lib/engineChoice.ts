// Which engine the load dialog offers first: one that can run on this node.

import type { EnginesReport } from '../api/types';

const NAMES: Record<string, string> = { vllm: 'vLLM', sim: 'simulated' };

export interface EngineChoice {
  /** The label of the "Server default" option: the engine a load without one gets. */
  defaultLabel: string;
  /** What the dialog selects first: the server's default when it can run, else one that can. */
  initial: 'default' | 'sim';
  /** One line on why vLLM cannot run here (shown under the select); null when it can. */
  vllmUnavailable: string | null;
}

/** The dialog's engine choice, from `GET /api/v1/engines` (undefined while it loads). */
export function engineChoice(engines: EnginesReport | undefined, demo: boolean): EngineChoice {
  const fallback = demo ? 'sim' : 'vllm';
  const defaultEngine = engines?.defaultEngine ?? fallback;
  const vllmUnavailable =
    engines && !engines.vllm.available
      ? `vLLM cannot run on this node: ${engines.vllm.error ?? 'not found'}.`
      : null;
  const defaultRuns = defaultEngine !== 'vllm' || vllmUnavailable === null;
  return {
    defaultLabel: `Server default (${NAMES[defaultEngine] ?? defaultEngine}${defaultRuns ? '' : ', cannot run here'})`,
    initial: defaultRuns ? 'default' : 'sim',
    vllmUnavailable,
  };
}
