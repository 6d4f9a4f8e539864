// @vitest-environment happy-dom
import { afterEach, describe, expect, it } from 'vitest';
import { api, ApiError, onUnauthorized, setToken, storedTokenExpired, tokenExpiry } from './client';
function jwt(payload) {
    const b64url = (s) => btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
    return `${b64url('{"alg":"HS256","typ":"JWT"}')}.${b64url(JSON.stringify(payload))}.sig`;
}
afterEach(() => setToken(null));
describe('tokenExpiry', () => {
    it('reads exp (seconds) as milliseconds', () => {
        expect(tokenExpiry(jwt({ sub: 'a', exp: 1_700_000_000 }))).toBe(1_700_000_000_000);
    });
    it('decodes base64url payloads that need padding and use - and _', () => {
        // "~~~" encodes to "fn5+" in base64: the URL-safe form has a '-'.
        expect(tokenExpiry(jwt({ sub: '~~~>>>?', exp: 42 }))).toBe(42_000);
    });
    it.each([
        ['not a jwt', 'not-a-jwt'],
        ['no exp claim', jwt({ sub: 'a' })],
        ['exp not a number', jwt({ exp: 'soon' })],
        ['payload not JSON', 'a.b.c'],
    ])('is null for %s', (_, token) => expect(tokenExpiry(token)).toBeNull());
});
describe('an expired stored token', () => {
    it('is noticed without asking the server, and ends the session', async () => {
        setToken(jwt({ sub: 'a', exp: Math.floor(Date.now() / 1000) - 60 }));
        expect(storedTokenExpired()).toBe(true);
        let calls = 0;
        const off = onUnauthorized(() => calls++);
        try {
            await expect(api('/api/v1/models')).rejects.toMatchObject({ status: 401, code: 'token_expired' });
            await expect(api('/api/v1/models')).rejects.toBeInstanceOf(ApiError);
        }
        finally {
            off();
        }
        expect(calls).toBe(2);
    });
    it('does not apply to a token that is still valid or has no exp', () => {
        setToken(jwt({ sub: 'a', exp: Math.floor(Date.now() / 1000) + 3600 }));
        expect(storedTokenExpired()).toBe(false);
        setToken('opaque-token');
        expect(storedTokenExpired()).toBe(false);
    });
});
