import { describe, expect, it } from 'vitest';
import { authorizeUrl, base64Url, codeChallenge } from './oidc';

describe('PKCE', () => {
  it('derives the S256 challenge of RFC 7636 appendix B', async () => {
    expect(await codeChallenge('dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk')).toBe(
      'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM',
    );
  });

  it('encodes base64url without padding', () => {
    expect(base64Url(new Uint8Array([251, 255, 191]))).toBe('-_-_');
    expect(base64Url(new Uint8Array([1]))).toBe('AQ');
  });

  it('builds the authorization request', () => {
    const url = new URL(
      authorizeUrl('https://idp.example/auth?tenant=x', {
        clientId: 'sardeenz',
        redirectUri: 'https://node:3000/auth/callback',
        state: 'st',
        challenge: 'ch',
      }),
    );
    expect(Object.fromEntries(url.searchParams)).toEqual({
      tenant: 'x',
      response_type: 'code',
      client_id: 'sardeenz',
      redirect_uri: 'https://node:3000/auth/callback',
      scope: 'openid profile',
      state: 'st',
      code_challenge: 'ch',
      code_challenge_method: 'S256',
    });
  });

  it("asks for the provider's scopes when it names them (OpenShift's OAuth server)", () => {
    const url = new URL(
      authorizeUrl('https://oauth-openshift.apps.example/oauth/authorize', {
        clientId: 'sardeenz',
        redirectUri: 'https://node:3000/auth/callback',
        state: 'st',
        challenge: 'ch',
        scope: 'user:info user:check-access',
      }),
    );
    expect(url.searchParams.get('scope')).toBe('user:info user:check-access');
  });
});
