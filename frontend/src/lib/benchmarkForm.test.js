import { describe, expect, it } from 'vitest';
import { defaultScenario, validateRun } from './benchmarkForm';
describe('validateRun', () => {
    it('turns the default form into a request', () => {
        const { body } = validateRun({ name: ' smoke ', mode: 'isolated', scenarios: [defaultScenario('abc')] });
        expect(body).toEqual({
            name: 'smoke',
            mode: 'isolated',
            scenarios: [
                { instanceId: 'abc', routingMode: 'direct', inputTokens: 128, outputTokens: 64, concurrency: 4, warmupRequests: 2, totalRequests: 20 },
            ],
        });
    });
    it('reports each out-of-range field of each scenario', () => {
        const bad = { ...defaultScenario(''), concurrency: '0', totalRequests: '2.5', slaThresholdMs: '-1' };
        const { body, errors } = validateRun({ name: '', mode: 'contention', scenarios: [defaultScenario('ok'), bad] });
        expect(body).toBeNull();
        expect(errors[0]).toEqual({});
        expect(Object.keys(errors[1] ?? {}).sort()).toEqual(['concurrency', 'instanceId', 'slaThresholdMs', 'totalRequests']);
    });
    it('passes an SLA when given', () => {
        const { body } = validateRun({ name: '', mode: 'isolated', scenarios: [{ ...defaultScenario('a'), slaThresholdMs: '250' }] });
        expect(body?.scenarios[0]?.slaThresholdMs).toBe(250);
        expect(body?.name).toBeUndefined();
    });
});
