// Pure helpers of moves: when to stop polling, the steps as a timeline.

import type { Move, MoveState } from '../api/types';

export const MOVE_FINISHED: ReadonlySet<MoveState> = new Set<MoveState>(['done', 'failed']);

export function moveFinished(move: Pick<Move, 'state'> | undefined): boolean {
  return move !== undefined && MOVE_FINISHED.has(move.state);
}

/** How often to ask for a move: every second until it is done or failed, then never. */
export function movePollInterval(move: Pick<Move, 'state'> | undefined): number | false {
  return moveFinished(move) ? false : 1000;
}

export const MOVE_STATE_COLOR: Record<MoveState, 'grey' | 'blue' | 'green' | 'red'> = {
  pending: 'grey',
  'starting-target': 'blue',
  switching: 'blue',
  draining: 'blue',
  'unloading-source': 'blue',
  done: 'green',
  failed: 'red',
};

export interface TimelineStep {
  name: string;
  detail: string;
  at: string;
  /** Seconds since the move was asked for. */
  offsetSeconds: number;
  /** Seconds since the step before (the first: since the move was asked for). */
  tookSeconds: number;
}

export function moveTimeline(move: Pick<Move, 'createdAt' | 'steps'>): TimelineStep[] {
  const start = Date.parse(move.createdAt);
  let previous = start;
  return move.steps.map((s) => {
    const at = Date.parse(s.at);
    const step = {
      name: s.name,
      detail: s.detail ?? '',
      at: s.at,
      offsetSeconds: Math.max(0, (at - start) / 1000),
      tookSeconds: Math.max(0, (at - previous) / 1000),
    };
    previous = at;
    return step;
  });
}

/** The move's duration: the server's once finished, else how long it has run so far. */
export function moveElapsed(move: Pick<Move, 'createdAt' | 'durationSeconds' | 'finishedAt'>, now: number): number {
  if (move.durationSeconds != null) return move.durationSeconds;
  const end = move.finishedAt ? Date.parse(move.finishedAt) : now;
  return Math.max(0, (end - Date.parse(move.createdAt)) / 1000);
}

/** "pod-a GPU 0 → pod-b GPU 1" (no GPUs: CPU; target GPUs unknown yet: "auto"). */
export function moveRoute(move: Pick<Move, 'sourcePodId' | 'sourceGpuIds' | 'targetPodId' | 'targetGpuIds'>): string {
  const g = (ids: number[] | null, unknown: string): string =>
    ids === null ? unknown : ids.length === 0 ? 'CPU' : `GPU ${ids.join(', ')}`;
  return `${move.sourcePodId} ${g(move.sourceGpuIds, 'CPU')} → ${move.targetPodId} ${g(move.targetGpuIds, 'GPU auto')}`;
}
