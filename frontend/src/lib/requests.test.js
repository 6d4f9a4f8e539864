import { describe, expect, it } from 'vitest';
import { EMPTY_FILTERS, formatTokens, requestsPath, statusColor } from './requests';
describe('requestsPath', () => {
    it('leaves out empty filters', () => {
        expect(requestsPath(EMPTY_FILTERS)).toBe('/api/v1/requests?limit=100');
    });
    it('encodes the ones given', () => {
        expect(requestsPath({ model: ' org/m a ', status: '5xx', key: 'team-a', limit: 50 })).toBe('/api/v1/requests?model=org%2Fm+a&status=5xx&key=team-a&limit=50');
    });
});
describe('formatTokens and statusColor', () => {
    it('shows unknown tokens as a dash, never zero', () => {
        expect(formatTokens(null, null)).toBe('—');
        expect(formatTokens(12, null)).toBe('12 / —');
        expect(formatTokens(0, 7)).toBe('0 / 7');
    });
    it('colours by class', () => {
        expect(statusColor(200)).toBe('green');
        expect(statusColor(403)).toBe('orange');
        expect(statusColor(499)).toBe('grey');
        expect(statusColor(502)).toBe('red');
    });
});
