// Server state through TanStack Query: one hook per resource, one per action.

import { queryOptions, useMutation, useQuery, useQueryClient, type QueryClient } from '@tanstack/react-query';
import { api, apiText } from './client';
import type {
  AuditEntry,
  BenchmarkCreate,
  BenchmarkRun,
  EnginesReport,
  FitRequest,
  FitVerdict,
  GpuReport,
  HealthReport,
  LoadRequest,
  MemoryProfile,
  ModelInstance,
  ProfileCreate,
} from './types';

export const keys = {
  health: ['health'] as const,
  instances: ['instances'] as const,
  instance: (id: string) => ['instances', id] as const,
  gpus: ['gpus'] as const,
  engines: ['engines'] as const,
  profiles: ['profiles'] as const,
  benchmarks: ['benchmarks'] as const,
  benchmark: (id: string) => ['benchmarks', id] as const,
  audit: (beforeId: number | null) => ['audit', beforeId] as const,
  fit: (req: FitRequest | null) => ['fit', req] as const,
};

const POLL_MS = 5000;

export const healthQuery = queryOptions({
  queryKey: keys.health,
  queryFn: () => api<HealthReport>('/api/health'),
  refetchInterval: 15000,
});

export const instancesQuery = queryOptions({
  queryKey: keys.instances,
  queryFn: () => api<ModelInstance[]>('/api/v1/models'),
  refetchInterval: POLL_MS * 2, // live updates come over SSE; this is the safety net
});

export const gpusQuery = queryOptions({
  queryKey: keys.gpus,
  queryFn: () => api<GpuReport>('/api/v1/gpus'),
  refetchInterval: POLL_MS,
});

export function useHealth() {
  return useQuery(healthQuery);
}

export function useInstances() {
  return useQuery(instancesQuery);
}

export function useInstance(id: string) {
  return useQuery({
    queryKey: keys.instance(id),
    queryFn: () => api<ModelInstance>(`/api/v1/models/${encodeURIComponent(id)}`),
    refetchInterval: POLL_MS,
  });
}

export function useGpus() {
  return useQuery(gpusQuery);
}

/** The node probes its vLLM once at start-up, so there is nothing to poll. */
export function useEngines() {
  return useQuery({ queryKey: keys.engines, queryFn: () => api<EnginesReport>('/api/v1/engines'), staleTime: 5 * 60_000 });
}

export function useProfiles() {
  return useQuery({ queryKey: keys.profiles, queryFn: () => api<MemoryProfile[]>('/api/memory/profiles') });
}

export function useBenchmarks() {
  return useQuery({
    queryKey: keys.benchmarks,
    queryFn: () => api<BenchmarkRun[]>('/api/benchmarks'),
    refetchInterval: POLL_MS * 2,
  });
}

/** One run; idle without an id (an empty id would ask for `/api/benchmarks/`, the list). */
export function useBenchmark(id: string) {
  return useQuery({
    queryKey: keys.benchmark(id),
    queryFn: () => api<BenchmarkRun>(`/api/benchmarks/${encodeURIComponent(id)}`),
    enabled: id !== '',
  });
}

export function useAudit(beforeId: number | null) {
  const qs = beforeId === null ? '' : `&beforeId=${beforeId}`;
  return useQuery({
    queryKey: keys.audit(beforeId),
    queryFn: () => api<AuditEntry[]>(`/api/audit?limit=50${qs}`),
    refetchInterval: beforeId === null ? POLL_MS * 2 : false,
  });
}

/** The fit verdict for a load-to-be; idle while `req` is null. */
export function useFitCheck(req: FitRequest | null) {
  return useQuery({
    queryKey: keys.fit(req),
    queryFn: ({ signal }) => api<FitVerdict>('/api/memory/profiles/check', { method: 'POST', body: req, signal }),
    enabled: req !== null,
    staleTime: 3000,
    retry: false,
  });
}

export function fetchMetricsText(): Promise<string> {
  return apiText('/api/v1/metrics');
}

/** Replaces (or drops) one instance in the cached list and its own entry. */
export function putInstance(qc: QueryClient, inst: ModelInstance, removed = false): void {
  qc.setQueryData<ModelInstance[]>(keys.instances, (old) => {
    if (!old) return old;
    const rest = old.filter((i) => i.id !== inst.id);
    return removed ? rest : old.some((i) => i.id === inst.id) ? old.map((i) => (i.id === inst.id ? inst : i)) : [...old, inst];
  });
  if (removed) qc.removeQueries({ queryKey: keys.instance(inst.id), exact: true });
  else qc.setQueryData(keys.instance(inst.id), inst);
}

function useInstanceAction<V>(fn: (v: V) => Promise<ModelInstance>, removes = false) {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: fn,
    onSuccess: (inst) => {
      putInstance(qc, inst, removes);
      void qc.invalidateQueries({ queryKey: keys.gpus });
    },
  });
}

export function useLoadModel() {
  return useInstanceAction((req: LoadRequest) => api<ModelInstance>('/api/v1/models/load', { method: 'POST', body: req }));
}

export function useUnloadModel() {
  return useInstanceAction(
    (id: string) => api<ModelInstance>(`/api/v1/models/${encodeURIComponent(id)}/unload`, { method: 'POST' }),
    true,
  );
}

export function useSleepModel() {
  return useInstanceAction(({ id, level }: { id: string; level: 1 | 2 }) =>
    api<ModelInstance>(`/api/v1/models/${encodeURIComponent(id)}/sleep`, { method: 'POST', body: { level } }),
  );
}

export function useWakeModel() {
  return useInstanceAction((id: string) =>
    api<ModelInstance>(`/api/v1/models/${encodeURIComponent(id)}/wake`, { method: 'POST' }),
  );
}

export function useCreateProfile() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (body: ProfileCreate) => api<MemoryProfile>('/api/memory/profiles', { method: 'POST', body }),
    onSuccess: () => qc.invalidateQueries({ queryKey: keys.profiles }),
  });
}

export function useDeleteProfile() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (id: string) => api<undefined>(`/api/memory/profiles/${encodeURIComponent(id)}`, { method: 'DELETE' }),
    onSuccess: () => qc.invalidateQueries({ queryKey: keys.profiles }),
  });
}

export function useCreateBenchmark() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (body: BenchmarkCreate) => api<BenchmarkRun>('/api/benchmarks', { method: 'POST', body }),
    onSuccess: (run) => {
      qc.setQueryData(keys.benchmark(run.id), run);
      void qc.invalidateQueries({ queryKey: keys.benchmarks, exact: true });
    },
  });
}

export function useCancelBenchmark() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (id: string) => api<BenchmarkRun>(`/api/benchmarks/${encodeURIComponent(id)}/cancel`, { method: 'POST' }),
    onSuccess: (run) => qc.setQueryData(keys.benchmark(run.id), run),
  });
}

export function useDeleteBenchmark() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (id: string) => api<undefined>(`/api/benchmarks/${encodeURIComponent(id)}`, { method: 'DELETE' }),
    onSuccess: (_, id) => {
      qc.removeQueries({ queryKey: keys.benchmark(id) });
      void qc.invalidateQueries({ queryKey: keys.benchmarks, exact: true });
    },
  });
}
