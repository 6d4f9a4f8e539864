// Toasts: "Loading qwen…", "Unloaded …": short, dismissable, gone after 8 s.

import { Alert, AlertActionCloseButton, AlertGroup } from '@patternfly/react-core';
import { createContext, useCallback, useContext, useMemo, useState, type ReactNode } from 'react';

type Variant = 'success' | 'danger' | 'warning' | 'info';
interface Toast {
  id: number;
  variant: Variant;
  title: string;
  body?: string;
}

type Notify = (variant: Variant, title: string, body?: string) => void;
const NotifyContext = createContext<Notify>(() => undefined);

export function useNotify(): Notify {
  return useContext(NotifyContext);
}

let nextId = 1;

export function NotificationProvider({ children }: { children: ReactNode }) {
  const [toasts, setToasts] = useState<Toast[]>([]);
  const dismiss = useCallback((id: number) => setToasts((t) => t.filter((x) => x.id !== id)), []);
  const notify = useCallback<Notify>((variant, title, body) => {
    const id = nextId++;
    setToasts((t) => [...t.slice(-4), { id, variant, title, ...(body ? { body } : {}) }]);
  }, []);
  const value = useMemo(() => notify, [notify]);
  return (
    <NotifyContext.Provider value={value}>
      {children}
      <AlertGroup isToast isLiveRegion>
        {toasts.map((t) => (
          <Alert
            key={t.id}
            variant={t.variant}
            title={t.title}
            timeout={8000}
            onTimeout={() => dismiss(t.id)}
            actionClose={<AlertActionCloseButton onClose={() => dismiss(t.id)} />}
          >
            {t.body}
          </Alert>
        ))}
      </AlertGroup>
    </NotifyContext.Provider>
  );
}
