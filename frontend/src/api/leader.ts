// The dashboard follows the cluster leader.
//
// A follower answers admin calls (and the dashboard's own pages) with a 307 to the
// leader's origin. fetch() cannot follow that hop for us: the leader sends no CORS
// headers and the browser drops the Authorization header on a cross-origin redirect.
// A navigation can: reloading the current URL asks the follower again, whose 307 the
// browser follows to the same page on the leader. A pod with no leader serves the page
// itself, so the reload is rate-limited to avoid a loop during an election.

const RELOADED_AT = 'sardeenz.leaderReloadAt';
export const MIN_RELOAD_INTERVAL_MS = 5000;

export interface Reloader {
  reload: () => void;
}

/** Reloads the page so that the browser follows the follower's redirect; false when it
 *  did so less than MIN_RELOAD_INTERVAL_MS ago (the next redirect will try again). */
export function followLeader(
  now: number = Date.now(),
  location: Reloader = window.location,
  storage: Storage = sessionStorage,
): boolean {
  const last = Number(storage.getItem(RELOADED_AT) ?? 0);
  if (Number.isFinite(last) && now - last >= 0 && now - last < MIN_RELOAD_INTERVAL_MS) return false;
  storage.setItem(RELOADED_AT, String(now));
  location.reload();
  return true;
}
