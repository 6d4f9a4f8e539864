// Requests the first page needs, sent before React renders anything: the login
// settings, then (when no login is needed) the dashboard's data, in parallel.
import { authConfigQuery } from '../auth/AuthContext';
import { getToken } from './client';
import { gpusQuery, healthQuery, instancesQuery } from './queries';
export function startEarlyFetches(qc) {
    void qc.fetchQuery(authConfigQuery).then((config) => {
        if (config.authEnabled && getToken() === null)
            return; // the login page comes first
        void qc.prefetchQuery(instancesQuery);
        void qc.prefetchQuery(gpusQuery);
        void qc.prefetchQuery(healthQuery);
    }, () => undefined);
}
