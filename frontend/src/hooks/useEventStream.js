import { useEffect, useRef, useState } from 'react';
import { ApiError } from '../api/client';
import { readEvents } from '../api/sse';
const RETRY_MS = [1000, 2000, 5000, 10000];
/**
 * Follows an SSE endpoint while mounted (and `path` is not null). A stream the
 * server ends is reopened when `reconnect` is set; HTTP 4xx errors are final.
 */
export function useEventStream(path, handlers, reconnect = true) {
    const [state, setState] = useState('connecting');
    const [error, setError] = useState(null);
    const handlersRef = useRef(handlers);
    useEffect(() => {
        handlersRef.current = handlers;
    });
    useEffect(() => {
        if (path === null)
            return undefined;
        const controller = new AbortController();
        let timer;
        let attempt = 0;
        const connect = () => {
            setState('connecting');
            readEvents(path, (message) => handlersRef.current.onMessage(message), controller.signal, () => {
                attempt = 0;
                setState('open');
                setError(null);
                handlersRef.current.onOpen?.();
            })
                .then(() => {
                if (controller.signal.aborted)
                    return;
                if (reconnect)
                    retry();
                else
                    setState('ended');
            })
                .catch((e) => {
                if (controller.signal.aborted)
                    return;
                const final = e instanceof ApiError && e.status >= 400 && e.status < 500;
                setError(e instanceof Error ? e.message : String(e));
                setState('error');
                if (!final)
                    retry();
            });
        };
        const retry = () => {
            const delay = RETRY_MS[Math.min(attempt, RETRY_MS.length - 1)] ?? 10000;
            attempt += 1;
            timer = setTimeout(connect, delay);
        };
        connect();
        return () => {
            controller.abort();
            if (timer)
                clearTimeout(timer);
        };
    }, [path, reconnect]);
    return { state, error };
}
