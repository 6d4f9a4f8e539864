// The proxy's Prometheus text (/api/v1/metrics), parsed and turned into rates and quantiles.
/** Parses the text exposition format (comments skipped, label escapes honoured). */
export function parsePrometheus(text) {
    const samples = [];
    for (const raw of text.split('\n')) {
        const line = raw.trim();
        if (!line || line.startsWith('#'))
            continue;
        const sample = parseLine(line);
        if (sample)
            samples.push(sample);
    }
    return samples;
}
function parseLine(line) {
    const brace = line.indexOf('{');
    const space = line.indexOf(' ');
    if (brace === -1 || (space !== -1 && space < brace)) {
        const [name, value] = line.split(/\s+/);
        return name && value !== undefined ? { name, labels: {}, value: parseValue(value) } : null;
    }
    const name = line.slice(0, brace);
    const labels = {};
    let i = brace + 1;
    while (i < line.length && line[i] !== '}') {
        const eq = line.indexOf('=', i);
        if (eq === -1 || line[eq + 1] !== '"')
            return null;
        const key = line.slice(i, eq).trim();
        let j = eq + 2;
        let value = '';
        while (j < line.length && line[j] !== '"') {
            if (line[j] === '\\' && j + 1 < line.length) {
                const next = line[j + 1];
                value += next === 'n' ? '\n' : next;
                j += 2;
            }
            else {
                value += line[j];
                j += 1;
            }
        }
        labels[key] = value;
        i = j + 1;
        if (line[i] === ',')
            i += 1;
    }
    const rest = line.slice(i + 1).trim().split(/\s+/)[0];
    return rest === undefined ? null : { name, labels, value: parseValue(rest) };
}
function parseValue(text) {
    if (text === '+Inf')
        return Infinity;
    if (text === '-Inf')
        return -Infinity;
    return Number(text);
}
/** Labels the proxy uses for requests that named no known model, or went direct. */
const SPECIAL_MODELS = new Set(['_unknown', '_direct']);
/** Per served model: request counters and the request-duration histogram. */
export function modelCounters(samples) {
    const byModel = new Map();
    const get = (model) => {
        let entry = byModel.get(model);
        if (!entry) {
            entry = { model, requests: 0, errors: 0, inFlight: 0, duration: [] };
            byModel.set(model, entry);
        }
        return entry;
    };
    for (const s of samples) {
        const model = s.labels.model;
        if (model === undefined)
            continue;
        switch (s.name) {
            case 'sardeenz_proxy_requests_total': {
                const entry = get(model);
                entry.requests += s.value;
                if (Number(s.labels.status) >= 500)
                    entry.errors += s.value;
                break;
            }
            case 'sardeenz_proxy_requests_in_flight':
                get(model).inFlight = s.value;
                break;
            case 'sardeenz_proxy_request_duration_seconds_bucket':
                get(model).duration.push([parseValue(s.labels.le ?? '+Inf'), s.value]);
                break;
            default:
                break;
        }
    }
    for (const entry of byModel.values())
        entry.duration.sort((a, b) => a[0] - b[0]);
    return byModel;
}
/**
 * The q-quantile of a cumulative histogram, interpolated linearly inside the
 * bucket as Prometheus' histogram_quantile() does. Null when it is empty.
 */
export function histogramQuantile(q, buckets) {
    const last = buckets[buckets.length - 1];
    if (!last || last[1] <= 0)
        return null;
    const rank = q * last[1];
    let prevLe = 0;
    let prevCount = 0;
    for (const [le, count] of buckets) {
        if (count >= rank) {
            if (le === Infinity)
                return prevLe;
            const inBucket = count - prevCount;
            if (inBucket <= 0)
                return le;
            return prevLe + ((le - prevLe) * (rank - prevCount)) / inBucket;
        }
        prevLe = le;
        prevCount = count;
    }
    return prevLe;
}
/** Buckets observed between two scrapes (a counter reset counts from zero). */
export function bucketDelta(prev, curr) {
    if (!prev || prev.length !== curr.length)
        return curr;
    const reset = curr.some(([, count], i) => count < (prev[i]?.[1] ?? 0));
    if (reset)
        return curr;
    return curr.map(([le, count], i) => [le, count - (prev[i]?.[1] ?? 0)]);
}
/** Rates and latency quantiles per model between two scrapes ``seconds`` apart. */
export function ratesBetween(prev, curr, seconds) {
    const out = [];
    for (const c of curr.values()) {
        if (SPECIAL_MODELS.has(c.model))
            continue;
        const p = prev.get(c.model);
        const delta = (now, before) => before === undefined || now < before ? now : now - before;
        const buckets = bucketDelta(p?.duration, c.duration);
        out.push({
            model: c.model,
            requestsPerSecond: seconds > 0 ? delta(c.requests, p?.requests) / seconds : 0,
            errorsPerSecond: seconds > 0 ? delta(c.errors, p?.errors) / seconds : 0,
            inFlight: c.inFlight,
            p50: histogramQuantile(0.5, buckets),
            p95: histogramQuantile(0.95, buckets),
        });
    }
    return out.sort((a, b) => a.model.localeCompare(b.model));
}
