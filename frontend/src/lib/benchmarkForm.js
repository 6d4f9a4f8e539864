// The new-benchmark form: text fields -> a valid BenchmarkCreate, or what is wrong.
export function defaultScenario(instanceId) {
    return {
        instanceId,
        routingMode: 'direct',
        inputTokens: '128',
        outputTokens: '64',
        concurrency: '4',
        warmupRequests: '2',
        totalRequests: '20',
        slaThresholdMs: '',
    };
}
/** Bounds of the server's schema (src/sardeenz/bench/models.py). */
const LIMITS = {
    inputTokens: [1, 1_048_576, 'Input tokens'],
    outputTokens: [1, 1_048_576, 'Output tokens'],
    concurrency: [1, 1024, 'Concurrency'],
    warmupRequests: [0, 10_000, 'Warm-up requests'],
    totalRequests: [1, 100_000, 'Measured requests'],
};
export function validateRun(form) {
    const errors = form.scenarios.map((s) => {
        const e = {};
        if (!s.instanceId)
            e.instanceId = 'Choose an active instance.';
        for (const [field, [min, max, label]] of Object.entries(LIMITS)) {
            const v = Number(s[field]);
            if (!/^\d+$/.test(s[field].trim()) || v < min || v > max)
                e[field] = `${label}: a whole number from ${min} to ${max}.`;
        }
        if (s.slaThresholdMs.trim()) {
            const v = Number(s.slaThresholdMs);
            if (!Number.isFinite(v) || v <= 0 || v > 3_600_000)
                e.slaThresholdMs = 'SLA: milliseconds, above 0.';
        }
        return e;
    });
    if (form.scenarios.length === 0 || errors.some((e) => Object.keys(e).length > 0))
        return { body: null, errors };
    const scenarios = form.scenarios.map((s) => {
        const spec = {
            instanceId: s.instanceId,
            routingMode: s.routingMode,
            inputTokens: Number(s.inputTokens),
            outputTokens: Number(s.outputTokens),
            concurrency: Number(s.concurrency),
            warmupRequests: Number(s.warmupRequests),
            totalRequests: Number(s.totalRequests),
        };
        if (s.slaThresholdMs.trim())
            spec.slaThresholdMs = Number(s.slaThresholdMs);
        return spec;
    });
    const body = { mode: form.mode, scenarios };
    if (form.name.trim())
        body.name = form.name.trim();
    return { body, errors };
}
