// OAuth 2.0 authorization-code flow with PKCE (RFC 7636), for an OIDC issuer.

import type { OidcConfig } from '../api/types';

const PENDING_KEY = 'sardeenz.oidc.pending';

interface PendingLogin {
  state: string;
  verifier: string;
  returnTo: string;
  tokenEndpoint: string;
  clientId: string;
  redirectUri: string;
}

export function base64Url(bytes: Uint8Array): string {
  let binary = '';
  bytes.forEach((b) => (binary += String.fromCharCode(b)));
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function randomString(byteCount = 32): string {
  return base64Url(crypto.getRandomValues(new Uint8Array(byteCount)));
}

/** The S256 code challenge of a verifier. */
export async function codeChallenge(verifier: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier));
  return base64Url(new Uint8Array(digest));
}

interface Endpoints {
  authorization: string;
  token: string;
}

async function endpoints(oidc: OidcConfig): Promise<Endpoints> {
  if (oidc.authorizationEndpoint && oidc.tokenEndpoint) {
    return { authorization: oidc.authorizationEndpoint, token: oidc.tokenEndpoint };
  }
  const url = `${oidc.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
  const resp = await fetch(url);
  if (!resp.ok) throw new Error(`The identity provider's discovery document (${url}) answered ${resp.status}.`);
  const doc = (await resp.json()) as { authorization_endpoint?: string; token_endpoint?: string };
  if (!doc.authorization_endpoint || !doc.token_endpoint) {
    throw new Error('The identity provider does not publish its authorization and token endpoints.');
  }
  return { authorization: doc.authorization_endpoint, token: doc.token_endpoint };
}

export function authorizeUrl(
  authorizationEndpoint: string,
  params: { clientId: string; redirectUri: string; state: string; challenge: string; scope?: string | null },
): string {
  const url = new URL(authorizationEndpoint);
  url.searchParams.set('response_type', 'code');
  url.searchParams.set('client_id', params.clientId);
  url.searchParams.set('redirect_uri', params.redirectUri);
  url.searchParams.set('scope', params.scope || 'openid profile');
  url.searchParams.set('state', params.state);
  url.searchParams.set('code_challenge', params.challenge);
  url.searchParams.set('code_challenge_method', 'S256');
  return url.toString();
}

/** Sends the browser to the identity provider; it comes back to /auth/callback. */
export async function startLogin(oidc: OidcConfig, returnTo: string): Promise<void> {
  if (!oidc.clientId) throw new Error('No OIDC client id is configured (SARDEENZ_OIDC_CLIENT_ID).');
  const ep = await endpoints(oidc);
  const pending: PendingLogin = {
    state: randomString(16),
    verifier: randomString(48),
    returnTo,
    tokenEndpoint: ep.token,
    clientId: oidc.clientId,
    redirectUri: `${window.location.origin}/auth/callback`,
  };
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
  window.location.assign(
    authorizeUrl(ep.authorization, {
      clientId: pending.clientId,
      redirectUri: pending.redirectUri,
      state: pending.state,
      challenge: await codeChallenge(pending.verifier),
      scope: oidc.scope,
    }),
  );
}

/** Exchanges the callback's code for an access token; returns it and where to go next. */
export async function finishLogin(search: string): Promise<{ token: string; returnTo: string }> {
  const params = new URLSearchParams(search);
  const raw = sessionStorage.getItem(PENDING_KEY);
  sessionStorage.removeItem(PENDING_KEY);
  const error = params.get('error');
  if (error) throw new Error(`The identity provider refused the login: ${params.get('error_description') ?? error}`);
  if (!raw) throw new Error('No login was in progress in this tab; start again.');
  const pending = JSON.parse(raw) as PendingLogin;
  const code = params.get('code');
  if (!code || params.get('state') !== pending.state) throw new Error('The login response does not match this tab; start again.');
  const resp = await fetch(pending.tokenEndpoint, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code,
      redirect_uri: pending.redirectUri,
      client_id: pending.clientId,
      code_verifier: pending.verifier,
    }),
  });
  if (!resp.ok) throw new Error(`The token endpoint answered ${resp.status}.`);
  const body = (await resp.json()) as { access_token?: string };
  if (!body.access_token) throw new Error('The token endpoint sent no access token.');
  return { token: body.access_token, returnTo: pending.returnTo };
}
