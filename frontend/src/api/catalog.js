// The on-demand catalog (GET/PUT/DELETE /api/v1/catalog): types and query hooks.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { api } from './client';
const CATALOG = ['catalog'];
export function useCatalog() {
    return useQuery({ queryKey: CATALOG, queryFn: () => api('/api/v1/catalog'), refetchInterval: 5000 });
}
export function usePutCatalogEntry() {
    const qc = useQueryClient();
    return useMutation({
        mutationFn: ({ name, entry }) => api(`/api/v1/catalog/${encodeURIComponent(name)}`, { method: 'PUT', body: entry }),
        onSuccess: () => qc.invalidateQueries({ queryKey: CATALOG }),
    });
}
export function useDeleteCatalogEntry() {
    const qc = useQueryClient();
    return useMutation({
        mutationFn: (name) => api(`/api/v1/catalog/${encodeURIComponent(name)}`, { method: 'DELETE' }),
        onSuccess: () => qc.invalidateQueries({ queryKey: CATALOG }),
    });
}
