import { useQueryClient } from '@tanstack/react-query';
import { useCallback, useEffect, useReducer, useRef } from 'react';
import { ApiError } from '../api/client';
import { keys, presetApplyPath } from '../api/queries';
import { readEvents } from '../api/sse';
import { foldApply, IDLE_APPLY } from '../lib/presets';
/**
 * Applies a preset and follows its progress: `POST .../apply` answers with the
 * Server-Sent Events of the run (EventSource cannot POST, so it is read from the
 * fetch body). Leaving the page stops the reading, not the apply (the leader owns it).
 */
export function usePresetApply() {
    const [progress, dispatch] = useReducer(foldApply, IDLE_APPLY);
    const qc = useQueryClient();
    const controller = useRef(null);
    useEffect(() => () => controller.current?.abort(), []);
    const apply = useCallback((name) => {
        controller.current?.abort();
        const c = new AbortController();
        controller.current = c;
        dispatch({ type: 'start' });
        readEvents(presetApplyPath(name), (m) => dispatch({ type: 'event', event: m.event, data: m.data }), c.signal, undefined, 'POST')
            .then(() => {
            if (!c.signal.aborted)
                dispatch({ type: 'closed' });
        })
            .catch((e) => {
            if (c.signal.aborted)
                return;
            // fetch() itself failing is a TypeError: the server is not reachable.
            const error = e instanceof ApiError ? e : new ApiError(0, 'network_error', `The apply stream broke: ${String(e)}`);
            dispatch({ type: 'error', error });
        })
            .finally(() => {
            if (c.signal.aborted)
                return;
            void qc.invalidateQueries({ queryKey: keys.presets });
            void qc.invalidateQueries({ queryKey: keys.instances });
            void qc.invalidateQueries({ queryKey: keys.cluster });
        });
    }, [qc]);
    const reset = useCallback(() => {
        controller.current?.abort();
        controller.current = null;
        dispatch({ type: 'reset' });
    }, []);
    return { progress, apply, reset };
}
