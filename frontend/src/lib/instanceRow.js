// What a row of the instances table says beyond the raw fields: why it failed, how far and
// how long it has been starting, how much GPU memory it holds.
import { formatDuration } from './format';
/** The first line of a failed instance's error, clipped for a table cell (full text in a tooltip). */
export function failureReason(inst, max = 160) {
    if (inst.status !== 'failed')
        return null;
    const text = (inst.errorMessage ?? '').trim();
    if (!text)
        return 'failed without a reason: see its log';
    const first = text.split('\n').find((l) => l.trim() !== '')?.trim() ?? text;
    return first.length > max ? `${first.slice(0, max - 1)}…` : first;
}
/** Seconds since a starting instance was created; null for any other status. */
export function startingSeconds(inst, now) {
    if (inst.status !== 'starting')
        return null;
    const created = Date.parse(inst.createdAt);
    return Number.isFinite(created) ? Math.max(0, (now - created) / 1000) : null;
}
/** A starting row's phase and elapsed time, "loading weights · 12 s"; null for any other
 *  status. An instance from a server without phases says "loading". */
export function startingText(inst, now) {
    const seconds = startingSeconds(inst, now);
    if (inst.status !== 'starting')
        return null;
    const phase = inst.loadPhase ?? 'loading';
    if (seconds === null)
        return phase;
    const whole = Math.floor(seconds);
    return `${phase} · ${whole < 60 ? `${whole} s` : formatDuration(whole)}`;
}
/** GPU memory the instance holds: its reservation on each of its GPUs; null when unknown. */
export function gpuMemoryBytes(inst) {
    if (inst.reservedBytesPerGpu == null || inst.gpuIds.length === 0)
        return null;
    return inst.reservedBytesPerGpu * inst.gpuIds.length;
}
