// The request log page's pure parts: the query string of its filters, and totals.

export interface RequestFilters {
  model: string;
  status: string; // '' (all), '2xx', '4xx', '5xx', 'error' or a code
  key: string;
  /** The pod that ran it ('' : every pod). */
  pod: string;
  limit: number;
}

export const EMPTY_FILTERS: RequestFilters = { model: '', status: '', key: '', pod: '', limit: 100 };

/** `/api/v1/requests?...` for these filters: empty ones are left out. */
export function requestsPath(f: RequestFilters): string {
  const qs = new URLSearchParams();
  if (f.model.trim()) qs.set('model', f.model.trim());
  if (f.status) qs.set('status', f.status);
  if (f.key.trim()) qs.set('key', f.key.trim());
  if (f.pod) qs.set('pod', f.pod);
  qs.set('limit', String(f.limit));
  return `/api/v1/requests?${qs.toString()}`;
}

/** "12 / 7" for tokens in / out; "—" where the engine did not say. */
export function formatTokens(tokensIn: number | null, tokensOut: number | null): string {
  if (tokensIn == null && tokensOut == null) return '—';
  return `${tokensIn ?? '—'} / ${tokensOut ?? '—'}`;
}

/** The label colour of a status: success, client mistake, server trouble. */
export function statusColor(status: number): 'green' | 'orange' | 'red' | 'grey' {
  if (status < 400) return 'green';
  if (status === 499) return 'grey'; // the client left first
  return status < 500 ? 'orange' : 'red';
}
