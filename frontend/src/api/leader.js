// The dashboard follows the cluster leader.
//
// A follower answers admin calls (and the dashboard's own pages) with a 307 to the
// leader's origin. fetch() cannot follow that hop for us: the leader sends no CORS
// headers and the browser drops the Authorization header on a cross-origin redirect.
// A navigation can: reloading the current URL asks the follower again, whose 307 the
// browser follows to the same page on the leader.
//
// The reloads are rate-limited: a pod with no leader serves the page itself (an
// election), and a dashboard reached through a proxy that serves the page itself
// (`npm run dev`, a port-forward) would otherwise reload forever. The first reload may
// come at once; each next one from the same origin waits twice as long (5 s, 10 s, ...
// up to 5 min), and the count starts over after 10 quiet minutes. sessionStorage is per
// origin: a reload that reached the leader starts there with a clean slate.
const RELOADS = 'sardeenz.leaderReloads';
export const MIN_RELOAD_INTERVAL_MS = 5000;
const MAX_RELOAD_INTERVAL_MS = 5 * 60_000;
const RESET_AFTER_MS = 10 * 60_000;
function read(storage) {
    try {
        const v = JSON.parse(storage.getItem(RELOADS) ?? 'null');
        return v && typeof v.at === 'number' && typeof v.count === 'number' ? { at: v.at, count: v.count } : null;
    }
    catch {
        return null;
    }
}
/** How long after the `count`-th reload the next one may come. */
export function reloadInterval(count) {
    return Math.min(MIN_RELOAD_INTERVAL_MS * 2 ** Math.max(0, count - 1), MAX_RELOAD_INTERVAL_MS);
}
/** Reloads the page so that the browser follows the follower's redirect; false when the
 *  last reload was too recent (a later redirect or status poll will try again). */
export function followLeader(now = Date.now(), location = window.location, storage = sessionStorage) {
    const last = read(storage);
    const since = last ? now - last.at : Infinity;
    // A stored time in the future (the clock was set back) counts as long ago.
    const count = last && since >= 0 && since < RESET_AFTER_MS ? last.count : 0;
    if (last && since >= 0 && count > 0 && since < reloadInterval(count))
        return false;
    storage.setItem(RELOADS, JSON.stringify({ at: now, count: count + 1 }));
    location.reload();
    return true;
}
