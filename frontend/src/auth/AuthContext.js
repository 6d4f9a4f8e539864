import { jsx as _jsx } from "react/jsx-runtime";
import { queryOptions, useQuery, useQueryClient } from '@tanstack/react-query';
import { createContext, useCallback, useContext, useEffect, useMemo, useRef, useState } from 'react';
import { api, ApiError, getToken, isMissingRoute, notifyUnauthorized, onUnauthorized, setToken, tokenExpiry, } from '../api/client';
/** What a server without the auth endpoints means: auth off, every caller is admin. */
const NO_AUTH = { authEnabled: false, oidc: null };
const LOCAL_ADMIN = { subject: 'local', role: 'admin', authEnabled: false };
const AuthContext = createContext(null);
export function useAuth() {
    const auth = useContext(AuthContext);
    if (!auth)
        throw new Error('useAuth outside <AuthProvider>');
    return auth;
}
export function useCanMutate() {
    return useAuth().canMutate;
}
/** useCanMutate for parts that may render outside <AuthProvider> (a page under test):
 *  without one, nothing is offered. */
export function useCanMutateIfKnown() {
    return useContext(AuthContext)?.canMutate ?? false;
}
export const authConfigQuery = queryOptions({
    queryKey: ['auth', 'config'],
    queryFn: fetchConfig,
    staleTime: Infinity,
    retry: 1,
});
async function fetchConfig() {
    try {
        return await api('/api/auth/config');
    }
    catch (e) {
        if (isMissingRoute(e))
            return NO_AUTH;
        throw e;
    }
}
async function fetchMe() {
    try {
        return await api('/api/auth/me');
    }
    catch (e) {
        if (isMissingRoute(e))
            return LOCAL_ADMIN;
        throw e;
    }
}
function refused(e) {
    return e instanceof ApiError && (e.status === 401 || e.status === 403);
}
export function AuthProvider({ children }) {
    const qc = useQueryClient();
    const [token, setTokenState] = useState(getToken);
    const [loginMessage, setLoginMessage] = useState(null);
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
    useEffect(() => onUnauthorized(() => {
        if (!authEnabled || session.current === null)
            return;
        setLoginMessage('Your session has expired or the token was refused: log in again.');
        logout();
    }), [authEnabled, logout]);
    // A JWT says when it ends: the session ends then, not at the next refused request.
    useEffect(() => {
        const expiry = token ? tokenExpiry(token) : null;
        if (expiry === null)
            return;
        const timer = setTimeout(notifyUnauthorized, Math.min(Math.max(0, expiry - Date.now()), 2 ** 31 - 1));
        return () => clearTimeout(timer);
    }, [token]);
    const login = useCallback(async (newToken) => {
        setToken(newToken);
        try {
            const who = await qc.fetchQuery({ queryKey: ['auth', 'me', newToken], queryFn: fetchMe, staleTime: 0 });
            if (!who.role) {
                throw new ApiError(403, 'forbidden', `${who.subject} has no Sardeenz role (admin or admin-readonly).`);
            }
        }
        catch (e) {
            setToken(null);
            qc.removeQueries({ queryKey: ['auth', 'me', newToken] });
            throw e;
        }
        setLoginMessage(null);
        setTokenState(newToken);
    }, [qc]);
    const value = useMemo(() => {
        let status = 'ready';
        let error = null;
        if (config.isError)
            [status, error] = ['error', config.error];
        else if (config.isPending)
            status = 'loading';
        else if (!authEnabled)
            status = 'ready';
        else if (token === null || refused(me.error))
            status = 'login';
        else if (me.isError)
            [status, error] = ['error', me.error];
        else if (me.isPending)
            status = 'loading';
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
    return _jsx(AuthContext.Provider, { value: value, children: children });
}
