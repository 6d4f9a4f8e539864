// The request log and usage (GET /api/v1/requests, /api/v1/usage): types and hooks.
import { useQuery } from '@tanstack/react-query';
import { requestsPath } from '../lib/requests';
import { api } from './client';
export const LIVE_MS = 2000;
export function useRequests(filters, live) {
    return useQuery({
        queryKey: ['requests', filters],
        queryFn: () => api(requestsPath(filters)),
        refetchInterval: live ? LIVE_MS : false,
    });
}
export function useUsage(live) {
    return useQuery({
        queryKey: ['usage'],
        queryFn: () => api('/api/v1/usage'),
        refetchInterval: live ? LIVE_MS : false,
    });
}
