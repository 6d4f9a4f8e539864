// LoRA adapters (GET /api/v1/adapters, POST /api/v1/adapters/{name}/load|unload): types and hooks.

import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { api } from './client';

export type AdapterState = 'active' | 'sleeping' | 'unloaded';

/** One instance of the base holding the adapter. */
export interface AdapterPlacement {
  /** The pod (null on a single node). */
  podId: string | null;
  instanceId: string;
  /** The adapter's requests running there now. */
  inFlight: number;
  /** The base instance sleeps (it keeps its adapters). */
  sleeping: boolean;
}

export interface AdapterView {
  name: string;
  /** The base entry (adapterOf). */
  base: string;
  adapterPath: string;
  aliases: string[];
  state: AdapterState;
  loadedOn: AdapterPlacement[];
}

export type AdapterAction = 'load' | 'unload';

const ADAPTERS = ['adapters'] as const;

export function useAdapters() {
  // Adapters come and go with traffic and the idle TTL, not with this page's actions only.
  return useQuery({ queryKey: ADAPTERS, queryFn: () => api<AdapterView[]>('/api/v1/adapters'), refetchInterval: 3000 });
}

export function useAdapterAction() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: ({ name, action }: { name: string; action: AdapterAction }) =>
      api<AdapterView>(`/api/v1/adapters/${encodeURIComponent(name)}/${action}`, { method: 'POST' }),
    onSettled: () => {
      void qc.invalidateQueries({ queryKey: ADAPTERS });
      // A load may have started or woken the base: its catalog row changes too.
      void qc.invalidateQueries({ queryKey: ['catalog'] });
    },
  });
}
