// The on-demand catalog (GET/PUT/DELETE /api/v1/catalog): types and query hooks.

import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { api } from './client';
import type { EngineKind } from './types';

export type CatalogState = 'unloaded' | 'starting' | 'active' | 'sleeping' | 'stopping' | 'failed' | 'invalid' | 'unreachable';

export interface CatalogEntry {
  /** What the engine loads; absent (or "") for a LoRA adapter, which runs in its base. */
  modelPath?: string;
  engine?: EngineKind | 'external' | null;
  url?: string | null;
  apiKeyEnv?: string | null;
  apiKeyFile?: string | null;
  aliases?: string[];
  extraArgs?: string[];
  gpuIds?: number[] | null;
  gpuMemoryLimit?: number | null;
  tensorParallelSize?: number;
  sleepLevel?: 0 | 1 | 2;
  idleSleepSeconds?: number | null;
  idleUnloadSeconds?: number | null;
  pinned?: boolean;
  preload?: boolean;
  warmup?: boolean;
  warmupPrompt?: string | null;
  /** A base for LoRA adapters: adapters an instance holds at once (vLLM's --max-loras). */
  loraSlots?: number | null;
  /** With loraSlots: the largest adapter rank accepted (vLLM's --max-lora-rank). */
  maxLoraRank?: number | null;
  /** This entry is a LoRA adapter of that base entry (docs/catalog.md, "LoRA adapters"). */
  adapterOf?: string | null;
  /** With adapterOf: the folder holding the PEFT adapter, as the engine's host sees it. */
  adapterPath?: string | null;
}

export interface CatalogModel {
  name: string;
  source: 'config' | 'api';
  state: CatalogState;
  error: string | null;
  overridesConfig: boolean;
  instanceIds: string[];
  entry: CatalogEntry | null;
  /** Seconds since its instances last had a request (what the TTLs count); null with none. */
  idleSeconds?: number | null;
}

const CATALOG = ['catalog'] as const;

export function useCatalog() {
  return useQuery({ queryKey: CATALOG, queryFn: () => api<CatalogModel[]>('/api/v1/catalog'), refetchInterval: 5000 });
}

export function usePutCatalogEntry() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: ({ name, entry }: { name: string; entry: CatalogEntry }) =>
      api<CatalogModel>(`/api/v1/catalog/${encodeURIComponent(name)}`, { method: 'PUT', body: entry }),
    onSuccess: () => qc.invalidateQueries({ queryKey: CATALOG }),
  });
}

export function useDeleteCatalogEntry() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (name: string) => api<CatalogModel>(`/api/v1/catalog/${encodeURIComponent(name)}`, { method: 'DELETE' }),
    onSuccess: () => qc.invalidateQueries({ queryKey: CATALOG }),
  });
}
