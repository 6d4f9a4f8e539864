import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { ActionGroup, Alert, Bullseye, Button, Card, CardBody, CardTitle, Content, Divider, Form, FormGroup, TextArea, } from '@patternfly/react-core';
import { useState } from 'react';
import { useLocation } from 'react-router';
import { useAuth } from './AuthContext';
import { startLogin } from './oidc';
/** Log in with the identity provider (OIDC + PKCE) or a pasted bearer token. */
export function LoginPage() {
    const { config, login, loginMessage } = useAuth();
    const location = useLocation();
    const [token, setToken] = useState('');
    const [error, setError] = useState(null);
    const [busy, setBusy] = useState(false);
    const submit = async () => {
        setBusy(true);
        setError(null);
        try {
            await login(token.trim().replace(/^Bearer\s+/i, ''));
        }
        catch (e) {
            setError(e instanceof Error ? e.message : String(e));
        }
        finally {
            setBusy(false);
        }
    };
    const oidc = config.oidc;
    return (_jsx(Bullseye, { className: "sz-p-lg", children: _jsxs(Card, { style: { maxWidth: '36rem', width: '100%' }, children: [_jsx(CardTitle, { component: "h1", children: "Log in to Sardeenz" }), _jsxs(CardBody, { children: [loginMessage && _jsx(Alert, { isInline: true, variant: "warning", title: loginMessage, className: "sz-mb-md" }), oidc && (_jsxs(_Fragment, { children: [_jsxs(Button, { variant: "primary", isBlock: true, onClick: () => startLogin(oidc, `${location.pathname}${location.search}`).catch((e) => setError(e.message)), children: ["Log in with ", new URL(oidc.issuer).host] }), _jsx(Divider, { className: "sz-my-lg" })] })), _jsxs(Form, { onSubmit: (e) => {
                                e.preventDefault();
                                void submit();
                            }, children: [_jsx(FormGroup, { label: "Bearer token", fieldId: "login-token", isRequired: true, children: _jsx(TextArea, { id: "login-token", value: token, onChange: (_e, v) => setToken(v), rows: 4, className: "sz-mono", placeholder: "eyJhbGciOi\u2026", resizeOrientation: "vertical" }) }), _jsx(Content, { component: "small", children: "A JWT with the role admin or admin-readonly. It is kept in this tab only (sessionStorage) and sent as Authorization: Bearer." }), error && _jsx(Alert, { isInline: true, variant: "danger", title: error }), _jsx(ActionGroup, { children: _jsx(Button, { type: "submit", variant: oidc ? 'secondary' : 'primary', isDisabled: !token.trim() || busy, isLoading: busy, children: "Log in with token" }) })] })] })] }) }));
}
