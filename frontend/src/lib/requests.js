// The request log page's pure parts: the query string of its filters, and totals.
export const EMPTY_FILTERS = { model: '', status: '', key: '', limit: 100 };
/** `/api/v1/requests?...` for these filters: empty ones are left out. */
export function requestsPath(f) {
    const qs = new URLSearchParams();
    if (f.model.trim())
        qs.set('model', f.model.trim());
    if (f.status)
        qs.set('status', f.status);
    if (f.key.trim())
        qs.set('key', f.key.trim());
    qs.set('limit', String(f.limit));
    return `/api/v1/requests?${qs.toString()}`;
}
/** "12 / 7" for tokens in / out; "—" where the engine did not say. */
export function formatTokens(tokensIn, tokensOut) {
    if (tokensIn == null && tokensOut == null)
        return '—';
    return `${tokensIn ?? '—'} / ${tokensOut ?? '—'}`;
}
/** The label colour of a status: success, client mistake, server trouble. */
export function statusColor(status) {
    if (status < 400)
        return 'green';
    if (status === 499)
        return 'grey'; // the client left first
    return status < 500 ? 'orange' : 'red';
}
