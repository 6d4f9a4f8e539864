// Pure helpers of moves: when to stop polling, the steps as a timeline.
export const MOVE_FINISHED = new Set(['done', 'failed']);
export function moveFinished(move) {
    return move !== undefined && MOVE_FINISHED.has(move.state);
}
/** How often to ask for a move: every second until it is done or failed, then never. */
export function movePollInterval(move) {
    return moveFinished(move) ? false : 1000;
}
export const MOVE_STATE_COLOR = {
    pending: 'grey',
    'starting-target': 'blue',
    switching: 'blue',
    draining: 'blue',
    'unloading-source': 'blue',
    done: 'green',
    failed: 'red',
};
export function moveTimeline(move) {
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
export function moveElapsed(move, now) {
    if (move.durationSeconds != null)
        return move.durationSeconds;
    const end = move.finishedAt ? Date.parse(move.finishedAt) : now;
    return Math.max(0, (end - Date.parse(move.createdAt)) / 1000);
}
/** "pod-a GPU 0 → pod-b GPU 1" (no GPUs: CPU; target GPUs unknown yet: "auto"). */
export function moveRoute(move) {
    const g = (ids, unknown) => ids === null ? unknown : ids.length === 0 ? 'CPU' : `GPU ${ids.join(', ')}`;
    return `${move.sourcePodId} ${g(move.sourceGpuIds, 'CPU')} → ${move.targetPodId} ${g(move.targetGpuIds, 'GPU auto')}`;
}
