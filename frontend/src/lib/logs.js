// The log view's buffer: capped, filterable, copyable.
const MAX_LINES = 5000;
/** Appends and keeps the newest `cap` lines. */
export function appendCapped(lines, more, cap = MAX_LINES) {
    if (more.length === 0)
        return lines;
    const all = lines.concat(more);
    return all.length > cap ? all.slice(all.length - cap) : all;
}
/**
 * Lines matching the filter: case-insensitive substring, or a regular
 * expression when written /like this/. An invalid expression matches nothing
 * and is reported.
 */
export function filterLines(lines, filter) {
    const f = filter.trim();
    if (!f)
        return { lines, error: null };
    const regex = /^\/(.+)\/([a-z]*)$/.exec(f);
    if (regex) {
        try {
            const re = new RegExp(regex[1] ?? '', regex[2]?.includes('i') ? 'i' : '');
            return { lines: lines.filter((l) => re.test(l.text)), error: null };
        }
        catch (e) {
            return { lines: [], error: e.message };
        }
    }
    const needle = f.toLowerCase();
    return { lines: lines.filter((l) => l.text.toLowerCase().includes(needle)), error: null };
}
export function linesToText(lines) {
    return lines.map((l) => l.text).join('\n');
}
