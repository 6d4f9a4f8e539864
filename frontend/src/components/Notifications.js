import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
// Toasts: "Loading qwen…", "Unloaded …": short, dismissable, gone after 8 s.
import { Alert, AlertActionCloseButton, AlertGroup } from '@patternfly/react-core';
import { createContext, useCallback, useContext, useMemo, useState } from 'react';
const NotifyContext = createContext(() => undefined);
export function useNotify() {
    return useContext(NotifyContext);
}
let nextId = 1;
export function NotificationProvider({ children }) {
    const [toasts, setToasts] = useState([]);
    const dismiss = useCallback((id) => setToasts((t) => t.filter((x) => x.id !== id)), []);
    const notify = useCallback((variant, title, body) => {
        const id = nextId++;
        setToasts((t) => [...t.slice(-4), { id, variant, title, ...(body ? { body } : {}) }]);
    }, []);
    const value = useMemo(() => notify, [notify]);
    return (_jsxs(NotifyContext.Provider, { value: value, children: [children, _jsx(AlertGroup, { isToast: true, isLiveRegion: true, children: toasts.map((t) => (_jsx(Alert, { variant: t.variant, title: t.title, timeout: 8000, onTimeout: () => dismiss(t.id), actionClose: _jsx(AlertActionCloseButton, { onClose: () => dismiss(t.id) }), children: t.body }, t.id))) })] }));
}
