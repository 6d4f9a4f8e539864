// fetch() for the admin API: bearer token, JSON, errors as ApiError, 401 -> login.
const TOKEN_KEY = 'sardeenz.token';
export function getToken() {
    return sessionStorage.getItem(TOKEN_KEY);
}
export function setToken(token) {
    if (token)
        sessionStorage.setItem(TOKEN_KEY, token);
    else
        sessionStorage.removeItem(TOKEN_KEY);
}
/** An /api error: `detail` is for people, `code` is stable for code. */
export class ApiError extends Error {
    status;
    code;
    body;
    constructor(status, code, detail, body = null) {
        super(detail);
        this.name = 'ApiError';
        this.status = status;
        this.code = code;
        this.body = body;
    }
}
const unauthorizedListeners = new Set();
/** Called on every 401 (the token is missing, expired or refused). */
export function onUnauthorized(listener) {
    unauthorizedListeners.add(listener);
    return () => unauthorizedListeners.delete(listener);
}
export function notifyUnauthorized() {
    unauthorizedListeners.forEach((l) => l());
}
const leaderListeners = new Set();
/**
 * Called when a request was answered with a redirect: in a cluster, a follower sends
 * admin calls to the leader with a 307 to another origin, which fetch() cannot follow
 * for the dashboard (no CORS there, and the bearer token is dropped on a cross-origin
 * redirect). The app then moves the whole page (see api/leader.ts).
 */
export function onLeaderRedirect(listener) {
    leaderListeners.add(listener);
    return () => leaderListeners.delete(listener);
}
/** A redirected response (fetch with `redirect: 'manual'` sees only its type): tells
 *  the listeners and returns the error to throw; null for any other response. */
export function leaderRedirectError(resp) {
    if (resp.type !== 'opaqueredirect')
        return null;
    leaderListeners.forEach((l) => l());
    return new ApiError(307, 'leader_redirect', 'This pod follows another: the dashboard moves to the cluster leader.');
}
/** When a JWT says it expires (ms since the epoch); null for anything else (an opaque
 *  token, no `exp` claim, a payload that does not decode): only the server can judge it. */
export function tokenExpiry(token) {
    const parts = token.split('.');
    if (parts.length !== 3)
        return null;
    try {
        const b64 = (parts[1] ?? '').replace(/-/g, '+').replace(/_/g, '/');
        const payload = JSON.parse(atob(b64.padEnd(b64.length + ((4 - (b64.length % 4)) % 4), '=')));
        const exp = payload?.exp;
        return typeof exp === 'number' && Number.isFinite(exp) ? exp * 1000 : null;
    }
    catch {
        return null;
    }
}
/** Whether the stored token is a JWT past its `exp`: such a request would only be refused,
 *  and a page showing cached data might not ask the server for a while. */
export function storedTokenExpired(now = Date.now()) {
    const token = getToken();
    const expiry = token ? tokenExpiry(token) : null;
    return expiry !== null && expiry <= now;
}
export function authHeaders() {
    const token = getToken();
    return token ? { Authorization: `Bearer ${token}` } : {};
}
export async function errorFrom(resp) {
    let body = null;
    try {
        body = await resp.json();
    }
    catch {
        // not JSON (a proxy's HTML page, say): fall back to the status text
    }
    const obj = (typeof body === 'object' && body !== null ? body : {});
    const detail = typeof obj.detail === 'string' ? obj.detail : `${resp.status} ${resp.statusText}`.trim();
    const code = typeof obj.code === 'string' ? obj.code : `http_${resp.status}`;
    if (resp.status === 401)
        notifyUnauthorized();
    return new ApiError(resp.status, code, detail, body);
}
async function send(path, opts) {
    if (storedTokenExpired()) {
        notifyUnauthorized();
        throw new ApiError(401, 'token_expired', 'The token has expired: log in again.');
    }
    const headers = { Accept: 'application/json', ...authHeaders() };
    // Never follow a redirect blindly: the only one the API answers is a follower's 307 to
    // the leader (a cross-origin hop that would fail as a bare network error).
    const init = { method: opts.method ?? 'GET', headers, redirect: 'manual' };
    if (opts.signal)
        init.signal = opts.signal;
    if (opts.body !== undefined) {
        headers['Content-Type'] = 'application/json';
        init.body = JSON.stringify(opts.body);
    }
    let resp;
    try {
        resp = await fetch(path, init);
    }
    catch (e) {
        if (e.name === 'AbortError')
            throw e;
        throw new ApiError(0, 'network_error', 'The Sardeenz server cannot be reached: is it running?');
    }
    const moved = leaderRedirectError(resp);
    if (moved)
        throw moved;
    if (!resp.ok)
        throw await errorFrom(resp);
    return resp;
}
/** JSON from the API (undefined for 204). */
export async function api(path, opts = {}) {
    const resp = await send(path, opts);
    if (resp.status === 204)
        return undefined;
    return (await resp.json());
}
export async function apiText(path, opts = {}) {
    return (await send(path, opts)).text();
}
/** A 404 meaning "this server has no such route" (a feature not in this version). */
export function isMissingRoute(e) {
    return e instanceof ApiError && e.status === 404 && e.code === 'not_found';
}
