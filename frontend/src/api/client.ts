// fetch() for the admin API: bearer token, JSON, errors as ApiError, 401 -> login.

const TOKEN_KEY = 'sardeenz.token';

export function getToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token: string | null): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An /api error: `detail` is for people, `code` is stable for code. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly body: unknown;

  constructor(status: number, code: string, detail: string, body: unknown = null) {
    super(detail);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

type Listener = () => void;
const unauthorizedListeners = new Set<Listener>();

/** Called on every 401 (the token is missing, expired or refused). */
export function onUnauthorized(listener: Listener): () => void {
  unauthorizedListeners.add(listener);
  return () => unauthorizedListeners.delete(listener);
}

export function notifyUnauthorized(): void {
  unauthorizedListeners.forEach((l) => l());
}

/** When a JWT says it expires (ms since the epoch); null for anything else (an opaque
 *  token, no `exp` claim, a payload that does not decode): only the server can judge it. */
export function tokenExpiry(token: string): number | null {
  const parts = token.split('.');
  if (parts.length !== 3) return null;
  try {
    const b64 = (parts[1] ?? '').replace(/-/g, '+').replace(/_/g, '/');
    const payload: unknown = JSON.parse(atob(b64.padEnd(b64.length + ((4 - (b64.length % 4)) % 4), '=')));
    const exp = (payload as { exp?: unknown } | null)?.exp;
    return typeof exp === 'number' && Number.isFinite(exp) ? exp * 1000 : null;
  } catch {
    return null;
  }
}

/** Whether the stored token is a JWT past its `exp`: such a request would only be refused,
 *  and a page showing cached data might not ask the server for a while. */
export function storedTokenExpired(now: number = Date.now()): boolean {
  const token = getToken();
  const expiry = token ? tokenExpiry(token) : null;
  return expiry !== null && expiry <= now;
}

export function authHeaders(): Record<string, string> {
  const token = getToken();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

export async function errorFrom(resp: Response): Promise<ApiError> {
  let body: unknown = null;
  try {
    body = await resp.json();
  } catch {
    // not JSON (a proxy's HTML page, say): fall back to the status text
  }
  const obj = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const detail = typeof obj.detail === 'string' ? obj.detail : `${resp.status} ${resp.statusText}`.trim();
  const code = typeof obj.code === 'string' ? obj.code : `http_${resp.status}`;
  if (resp.status === 401) notifyUnauthorized();
  return new ApiError(resp.status, code, detail, body);
}

export interface RequestOptions {
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE';
  body?: unknown;
  signal?: AbortSignal;
}

async function send(path: string, opts: RequestOptions): Promise<Response> {
  if (storedTokenExpired()) {
    notifyUnauthorized();
    throw new ApiError(401, 'token_expired', 'The token has expired: log in again.');
  }
  const headers: Record<string, string> = { Accept: 'application/json', ...authHeaders() };
  const init: RequestInit = { method: opts.method ?? 'GET', headers };
  if (opts.signal) init.signal = opts.signal;
  if (opts.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(opts.body);
  }
  let resp: Response;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new ApiError(0, 'network_error', 'The Sardeenz server cannot be reached: is it running?');
  }
  if (!resp.ok) throw await errorFrom(resp);
  return resp;
}

/** JSON from the API (undefined for 204). */
export async function api<T>(path: string, opts: RequestOptions = {}): Promise<T> {
  const resp = await send(path, opts);
  if (resp.status === 204) return undefined as T;
  return (await resp.json()) as T;
}

export async function apiText(path: string, opts: RequestOptions = {}): Promise<string> {
  return (await send(path, opts)).text();
}

/** A 404 meaning "this server has no such route" (a feature not in this version). */
export function isMissingRoute(e: unknown): boolean {
  return e instanceof ApiError && e.status === 404 && e.code === 'not_found';
}
