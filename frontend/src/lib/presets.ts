// Pure helpers of the Presets page: plan steps in words, the apply stream folded
// into step states, the API's 422 errors keyed by field.

import { ApiError } from '../api/client';
import type { PlanStep, PresetPlan, RunStep } from '../api/types';

/** One plan step in words: what is done, and why (or why it cannot be). */
export interface StepText {
  title: string;
  detail: string;
  /** `unschedulable`: per pod, why it cannot take the replica, sorted by pod. */
  reasons: Array<[pod: string, reason: string]>;
}

function gpus(ids: number[] | undefined): string {
  if (!ids || ids.length === 0) return '';
  return `, GPU${ids.length > 1 ? 's' : ''} ${ids.join(', ')}`;
}

export function describeStep(step: PlanStep): StepText {
  const reasons = Object.entries(step.reasons ?? {}).sort(([a], [b]) => a.localeCompare(b));
  switch (step.action) {
    case 'load':
      return { title: `Load ${step.model} on pod ${step.podId ?? '?'}${gpus(step.gpuIds)}`, detail: step.reason ?? '', reasons };
    case 'unload':
      return {
        title: `Unload ${step.model}${step.instanceId ? ` (${step.instanceId})` : ''}${step.podId ? ` from pod ${step.podId}` : ''}`,
        detail: step.reason ?? '',
        reasons,
      };
    default:
      // The reason repeats every pod's; with them listed, a short lead-in is enough.
      return { title: `${step.model} fits nowhere`, detail: reasons.length > 0 ? 'No pod can take it:' : (step.reason ?? ''), reasons };
  }
}

/** One line summing a plan up: "2 loads, 1 unload, 1 unschedulable" or "nothing to do". */
export function planSummary(plan: Pick<PresetPlan, 'steps' | 'nothingToDo'>): string {
  if (plan.nothingToDo || plan.steps.length === 0) return 'Nothing to do: the cluster runs what the preset declares.';
  const count = (a: PlanStep['action']): number => plan.steps.filter((s) => s.action === a).length;
  const parts: string[] = [];
  const loads = count('load');
  const unloads = count('unload');
  const stuck = count('unschedulable');
  if (loads) parts.push(`${loads} load${loads > 1 ? 's' : ''}`);
  if (unloads) parts.push(`${unloads} unload${unloads > 1 ? 's' : ''}`);
  if (stuck) parts.push(`${stuck} unschedulable`);
  return parts.join(', ');
}

// --- the apply's Server-Sent Events, folded

export interface ApplyProgress {
  phase: 'idle' | 'starting' | 'running' | 'finished';
  steps: RunStep[];
  plan: PresetPlan | null;
  /** The `done` event: the run's outcome. */
  outcome: { state: string; failed: number; steps: number } | null;
  /** Why the apply was refused or the stream broke. */
  error: ApiError | Error | null;
}

export const IDLE_APPLY: ApplyProgress = { phase: 'idle', steps: [], plan: null, outcome: null, error: null };

export type ApplyAction =
  | { type: 'start' }
  | { type: 'reset' }
  | { type: 'event'; event: string; data: string }
  | { type: 'error'; error: ApiError | Error }
  | { type: 'closed' };

/** The reducer of an apply's progress: `plan` lists the steps (all pending), each
 *  `step` replaces one by its index, `done` ends it. A stream that closes without
 *  `done` (the server went away) is an error: the apply may go on without us. */
export function foldApply(p: ApplyProgress, a: ApplyAction): ApplyProgress {
  switch (a.type) {
    case 'start':
      return { ...IDLE_APPLY, phase: 'starting' };
    case 'reset':
      return IDLE_APPLY;
    case 'error':
      return { ...p, phase: 'finished', error: a.error };
    case 'closed':
      return p.phase === 'finished'
        ? p
        : { ...p, phase: 'finished', error: new Error('The progress stream ended early: the apply may still be running (see the preset’s last run).') };
    case 'event':
      return foldEvent(p, a.event, a.data);
  }
}

function foldEvent(p: ApplyProgress, event: string, data: string): ApplyProgress {
  let body: unknown;
  try {
    body = JSON.parse(data);
  } catch {
    return p; // a ping or junk: nothing to show
  }
  const obj = (body ?? {}) as Record<string, unknown>;
  if (event === 'plan') {
    const plan = obj as unknown as PresetPlan;
    const steps = (plan.steps ?? []).map((s): RunStep => ({ ...s, state: 'pending' }));
    return { ...p, phase: 'running', plan, steps };
  }
  if (event === 'step' && typeof obj.index === 'number') {
    const { index, ...rest } = obj;
    const steps = [...p.steps];
    while (steps.length <= index) steps.push({ action: 'load', model: '?', state: 'pending' });
    steps[index] = rest as unknown as RunStep;
    return { ...p, phase: 'running', steps };
  }
  if (event === 'done') {
    const outcome = {
      state: String(obj.state ?? 'done'),
      failed: Number(obj.failed ?? 0),
      steps: Number(obj.steps ?? p.steps.length),
    };
    return { ...p, phase: 'finished', outcome };
  }
  return p;
}

// --- the API's 422: `errors: [{field, message}]`

export type FieldErrors = Record<string, string[]>;

/** The 422's errors by field (`models.0.replicas`); anything else: {}. */
export function fieldErrors(error: unknown): FieldErrors {
  if (!(error instanceof ApiError) || error.status !== 422) return {};
  const list = (error.body as { errors?: unknown } | null)?.errors;
  const out: FieldErrors = {};
  if (!Array.isArray(list)) return out;
  for (const e of list as Array<{ field?: unknown; message?: unknown }>) {
    const field = typeof e.field === 'string' ? e.field : 'body';
    const message = typeof e.message === 'string' ? e.message : 'invalid';
    (out[field] ??= []).push(message.replace(/^Value error, /, ''));
  }
  return out;
}

/** The messages for one field and what lies under it (`models.0.extraArgs.2` is
 *  shown at `models.0.extraArgs`); undefined when there is none. */
export function errorAt(errors: FieldErrors, field: string): string | undefined {
  const hits = Object.entries(errors)
    .filter(([f]) => f === field || f.startsWith(`${field}.`))
    .flatMap(([, m]) => m);
  return hits.length > 0 ? hits.join('; ') : undefined;
}

/** The 409 `preset_unschedulable`'s steps (each with its reasons per pod). */
export function refusedSteps(error: unknown): PlanStep[] {
  if (!(error instanceof ApiError) || error.code !== 'preset_unschedulable') return [];
  const steps = (error.body as { steps?: unknown } | null)?.steps;
  return Array.isArray(steps) ? (steps as PlanStep[]) : [];
}
