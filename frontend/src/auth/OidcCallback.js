import { jsx as _jsx } from "react/jsx-runtime";
import { Alert, Bullseye, Button, Spinner } from '@patternfly/react-core';
import { useEffect, useRef, useState } from 'react';
import { useNavigate } from 'react-router';
import { useAuth } from './AuthContext';
import { finishLogin } from './oidc';
/** Where the identity provider sends the browser back: trade the code for a token. */
export function OidcCallback() {
    const { login } = useAuth();
    const navigate = useNavigate();
    const [error, setError] = useState(null);
    const started = useRef(false);
    useEffect(() => {
        if (started.current)
            return; // the code can be redeemed only once (StrictMode runs effects twice)
        started.current = true;
        finishLogin(window.location.search)
            .then(async ({ token, returnTo }) => {
            await login(token);
            void navigate(returnTo || '/', { replace: true });
        })
            .catch((e) => setError(e instanceof Error ? e.message : String(e)));
    }, [login, navigate]);
    return (_jsx(Bullseye, { className: "sz-p-xl", children: error ? (_jsx(Alert, { variant: "danger", title: "Login failed", actionLinks: _jsx(Button, { variant: "link", isInline: true, onClick: () => void navigate('/', { replace: true }), children: "Back to the login page" }), children: error })) : (_jsx(Spinner, { "aria-label": "Completing login" })) }));
}
