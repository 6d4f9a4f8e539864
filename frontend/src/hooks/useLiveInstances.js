import { useQueryClient } from '@tanstack/react-query';
import { useRef } from 'react';
import { keys, putInstance } from '../api/queries';
import { useEventStream } from './useEventStream';
/**
 * Keeps the cached instance list current from the server's status events
 * (`/api/v1/events`): every transition, and each load phase of a starting
 * instance (`phase` events), shows at once on every page.
 */
export function useLiveInstances() {
    const qc = useQueryClient();
    const opened = useRef(false);
    useEventStream('/api/v1/events', {
        // After a reconnection, transitions may have been missed while disconnected.
        onOpen: () => {
            if (opened.current)
                void qc.invalidateQueries({ queryKey: keys.instances });
            opened.current = true;
        },
        onMessage: ({ event, data }) => {
            if (event !== 'status' && event !== 'phase' && event !== 'removed')
                return;
            const payload = JSON.parse(data);
            putInstance(qc, payload.instance, event === 'removed');
            // A load phase changes no reservation; a transition may.
            if (event !== 'phase')
                void qc.invalidateQueries({ queryKey: keys.gpus });
        },
    });
}
