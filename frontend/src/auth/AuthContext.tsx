import { queryOptions, useQuery, useQueryClient } from '@tanstack/react-query';
import { createContext, useCallback, useContext, useEffect, useMemo, useRef, useState, type ReactNode } from 'react';
import {
  api,
  ApiError,
  getToken,
  isMissingRoute,
  notifyUnauthorized,
  onUnauthorized,
  setToken,
  tokenExpiry,
} from '../api/client';
import type { AuthConfig, Me } from '../api/types';

/** What a server without the auth endpoints means: auth off, every caller is admin. */
const NO_AUTH: AuthConfig = { authEnabled: false, oidc: null };
const LOCAL_ADMIN: Me = { subject: 'local', role: 'admin', authEnabled: false };

export type AuthStatus = 'loading' | 'error' | 'login' | 'ready';

export interface Auth {
  status: AuthStatus;
  /** Why the server cannot be asked (status 'error'). */
  error: Error | null;
  retry: () => void;
  config: AuthConfig;
  me: Me | null;
  /** admin (not admin-readonly): may load, unload, sleep, wake, create, delete. */
  canMutate: boolean;
  /** Why the user is asked to log in (again): an expired or refused token. */
  loginMessage: string | null;
  login: (token: string) => Promise<void>;
  logout: () => void;
}

const AuthContext = createContext<Auth | null>(null);

export function useAuth(): Auth {
  const auth = useContext(AuthContext);
  if (!auth) throw new Error('useAuth outside <AuthProvider>');
  return auth;
}

export function useCanMutate(): boolean {
  return useAuth().canMutate;
}

/** useCanMutate for parts that may render outside <AuthProvider> (a page under test):
 *  without one, nothing is offered. */
export function useCanMutateIfKnown(): boolean {
  return useContext(AuthContext)?.canMutate ?? false;
}

export const authConfigQuery = queryOptions({
  queryKey: ['auth', 'config'],
  queryFn: fetchConfig,
  staleTime: Infinity,
  retry: 1,
});

async function fetchConfig(): Promise<AuthConfig> {
  try {
    return await api<AuthConfig>('/api/auth/config');
  } catch (e) {
    if (isMissingRoute(e)) return NO_AUTH;
    throw e;
  }
}

async function fetchMe(): Promise<Me> {
  try {
    return await api<Me>('/api/auth/me');
  } catch (e) {
    if (isMissingRoute(e)) return LOCAL_ADMIN;
    throw e;
  }
}

function refused(e: unknown): boolean {
  return e instanceof ApiError && (e.status === 401 || e.status === 403);
}

export function AuthProvider({ children }: { children: ReactNode }) {
  const qc = useQueryClient();
  const [token, setTokenState] = useState<string | null>(getToken);
  const [loginMessage, setLoginMessage] = useState<string | null>(null);
  const config = useQuery(authConfigQuery);
  const authEnabled = config.data?.authEnabled ?? false;
  // With a token, who we are is asked alongside the config (no waterfall); with auth
  // off there is nothing to ask: every caller is a local admin.
  const me = useQuery({
    queryKey: ['auth', 'me', token],
    queryFn: fetchMe,
    enabled: token !== null && (config.isPending || authEnabled),
    staleTime: 60_000,
    retry: false,
  });

  const logout = useCallback(() => {
    setToken(null);
    setTokenState(null);
    qc.removeQueries({ predicate: (q) => q.queryKey[0] !== 'auth' || q.queryKey[1] !== 'config' });
  }, [qc]);

  // A 401 ends a session; during a login attempt (no session yet) it is that attempt's error.
  const session = useRef(token);
  session.current = token;
  useEffect(
    () =>
      onUnauthorized(() => {
        if (!authEnabled || session.current === null) return;
        setLoginMessage('Your session has expired or the token was refused: log in again.');
        logout();
      }),
    [authEnabled, logout],
  );

  // A JWT says when it ends: the session ends then, not at the next refused request.
  useEffect(() => {
    const expiry = token ? tokenExpiry(token) : null;
    if (expiry === null) return;
    const timer = setTimeout(notifyUnauthorized, Math.min(Math.max(0, expiry - Date.now()), 2 ** 31 - 1));
    return () => clearTimeout(timer);
  }, [token]);

  const login = useCallback(
    async (newToken: string) => {
      setToken(newToken);
      try {
        const who = await qc.fetchQuery({ queryKey: ['auth', 'me', newToken], queryFn: fetchMe, staleTime: 0 });
        if (!who.role) {
          throw new ApiError(403, 'forbidden', `${who.subject} has no Sardeenz role (admin or admin-readonly).`);
        }
      } catch (e) {
        setToken(null);
        qc.removeQueries({ queryKey: ['auth', 'me', newToken] });
        throw e;
      }
      setLoginMessage(null);
      setTokenState(newToken);
    },
    [qc],
  );

  const value = useMemo<Auth>(() => {
    let status: AuthStatus = 'ready';
    let error: Error | null = null;
    if (config.isError) [status, error] = ['error', config.error];
    else if (config.isPending) status = 'loading';
    else if (!authEnabled) status = 'ready';
    else if (token === null || refused(me.error)) status = 'login';
    else if (me.isError) [status, error] = ['error', me.error];
    else if (me.isPending) status = 'loading';
    const who = authEnabled ? (me.data ?? null) : LOCAL_ADMIN;
    return {
      status,
      error,
      retry: () => {
        void config.refetch();
        void me.refetch();
      },
      config: config.data ?? NO_AUTH,
      me: who,
      canMutate: who?.role === 'admin',
      loginMessage,
      login,
      logout,
    };
  }, [config, me, authEnabled, token, loginMessage, login, logout]);

  return <AuthContext.Provider value={value}>{children}</AuthContext.Provider>;
}
