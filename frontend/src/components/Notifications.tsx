// Toasts: "Loading qwen…", "Unloaded …": short, dismissable, gone after 8 s. At most
// three at a time, and the page reserves their height below its content so that,
// scrolled to the end, a table's last rows (Logs links, row menus) sit above them.

import { Alert, AlertActionCloseButton, AlertGroup } from '@patternfly/react-core';
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from 'react';

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
const MAX_TOASTS = 3;
/** The CSS variable app.css turns into space at the end of the page's scrolling area. */
const SPACE_VAR = '--sz-toast-space';

/** Keep SPACE_VAR at the toast stack's height (plus its offset from the bottom edge). */
function useReservedToastSpace(count: number): void {
  useEffect(() => {
    const root = document.documentElement;
    if (count === 0) {
      root.style.removeProperty(SPACE_VAR);
      return;
    }
    let group: HTMLElement | null = null;
    const update = (): void => {
      if (!group) return;
      const { top } = group.getBoundingClientRect();
      root.style.setProperty(SPACE_VAR, `${Math.max(0, Math.ceil(window.innerHeight - top))}px`);
    };
    const observer = new ResizeObserver(update);
    // PatternFly portals the group into <body> once mounted: look until it is there.
    let frame = 0;
    const attach = (): void => {
      group = document.querySelector<HTMLElement>('.pf-v6-c-alert-group.pf-m-toast');
      if (!group) {
        frame = requestAnimationFrame(attach);
        return;
      }
      update();
      observer.observe(group);
    };
    attach();
    window.addEventListener('resize', update);
    return () => {
      cancelAnimationFrame(frame);
      observer.disconnect();
      window.removeEventListener('resize', update);
    };
  }, [count]);
}

export function NotificationProvider({ children }: { children: ReactNode }) {
  const [toasts, setToasts] = useState<Toast[]>([]);
  const dismiss = useCallback((id: number) => setToasts((t) => t.filter((x) => x.id !== id)), []);
  const notify = useCallback<Notify>((variant, title, body) => {
    const id = nextId++;
    setToasts((t) => [...t.slice(-(MAX_TOASTS - 1)), { id, variant, title, ...(body ? { body } : {}) }]);
  }, []);
  const value = useMemo(() => notify, [notify]);
  useReservedToastSpace(toasts.length);
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
