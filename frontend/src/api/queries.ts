// Server state through TanStack Query: one hook per resource, one per action.

import { queryOptions, useMutation, useQuery, useQueryClient, type QueryClient } from '@tanstack/react-query';
import { api, apiText } from './client';
import type {
  AuditEntry,
  BenchmarkCreate,
  BenchmarkRun,
  ClusterStatus,
  EnginesReport,
  FitRequest,
  FitVerdict,
  GpuReport,
  HealthReport,
  LoadRequest,
  MemoryProfile,
  ModelInstance,
  Move,
  MoveCreate,
  Preset,
  PresetModel,
  PresetPlan,
  ProfileCreate,
  ResourceMetrics,
  ScheduleVerdict,
} from './types';
import { movePollInterval } from '../lib/moves';
import { keepSteward } from '../lib/managed';

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
  cluster: ['cluster'] as const,
  schedule: (req: LoadRequest | null) => ['schedule', req] as const,
  presets: ['presets'] as const,
  presetPlan: (name: string) => ['presets', name, 'plan'] as const,
  moves: ['moves'] as const,
  move: (id: string) => ['moves', id] as const,
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

/** This pod's view of the cluster (always answered locally, never redirected). Polled:
 *  peers' instances and states come from heartbeats, not from this pod's event stream. */
export const clusterQuery = queryOptions({
  queryKey: keys.cluster,
  queryFn: () => api<ClusterStatus>('/api/cluster/status'),
  refetchInterval: (query) => (query.state.data?.mode === 'single' ? 60_000 : 2000),
});

export function useClusterStatus() {
  return useQuery(clusterQuery);
}

/** The cluster status when this node is in a cluster; undefined on a single node. */
export function useClustered(): ClusterStatus | undefined {
  const { data } = useClusterStatus();
  return data && data.mode !== 'single' ? data : undefined;
}

export function useHealth() {
  return useQuery(healthQuery);
}

/** `pollMs`: poll faster than the safety net (cluster mode: other pods' instances
 *  change without an event on this pod's stream). */
export function useInstances(pollMs?: number) {
  return useQuery(pollMs ? { ...instancesQuery, refetchInterval: pollMs } : instancesQuery);
}

export function useInstance(id: string) {
  return useQuery({
    queryKey: keys.instance(id),
    queryFn: () => api<ModelInstance>(`/api/v1/models/${encodeURIComponent(id)}`),
    refetchInterval: POLL_MS,
  });
}

/** One instance's ResourceMetrics, from whichever pod runs it (the leader's locator asks). */
export function useInstanceMetrics(id: string) {
  return useQuery({
    queryKey: [...keys.instance(id), 'metrics'] as const,
    queryFn: () => api<ResourceMetrics>(`/api/v1/models/${encodeURIComponent(id)}/metrics`),
    refetchInterval: POLL_MS,
    retry: false,
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
    return removed
      ? rest
      : old.some((i) => i.id === inst.id)
        ? old.map((i) => (i.id === inst.id ? keepSteward(inst, i) : i))
        : [...old, inst];
  });
  if (removed) qc.removeQueries({ queryKey: keys.instance(inst.id), exact: true });
  else qc.setQueryData<ModelInstance>(keys.instance(inst.id), (prev) => keepSteward(inst, prev));
}

function useInstanceAction<V>(fn: (v: V) => Promise<ModelInstance>, removes = false) {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: fn,
    onSuccess: (inst) => {
      putInstance(qc, inst, removes);
      void qc.invalidateQueries({ queryKey: keys.gpus });
      void qc.invalidateQueries({ queryKey: keys.cluster });
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

// --- Cluster operations (docs/cluster.md: Scheduler, Presets, Moves)

/** The scheduler's dry run for a load without `podId`; idle while `req` is null. */
export function useScheduleVerdict(req: LoadRequest | null) {
  return useQuery({
    queryKey: keys.schedule(req),
    queryFn: ({ signal }) => api<ScheduleVerdict>('/api/cluster/schedule', { method: 'POST', body: req, signal }),
    enabled: req !== null,
    staleTime: 3000,
    retry: false,
  });
}

const presetPath = (name: string): string => `/api/cluster/presets/${encodeURIComponent(name)}`;

/** Every preset; polled, since the applied one's reconcile status changes by itself. */
export function usePresets() {
  return useQuery({ queryKey: keys.presets, queryFn: () => api<Preset[]>('/api/cluster/presets'), refetchInterval: POLL_MS });
}

/** What applying `name` would do now (asked again on demand: the cluster changes). */
export function usePresetPlan(name: string | null) {
  return useQuery({
    queryKey: keys.presetPlan(name ?? ''),
    queryFn: () => api<PresetPlan>(`${presetPath(name ?? '')}/plan`),
    enabled: name !== null,
    staleTime: 0,
    retry: false,
  });
}

export function usePutPreset() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: ({ name, models }: { name: string; models: PresetModel[] }) =>
      api<Preset>(presetPath(name), { method: 'PUT', body: { models } }),
    onSuccess: (preset) => {
      void qc.invalidateQueries({ queryKey: keys.presets });
      void qc.invalidateQueries({ queryKey: keys.presetPlan(preset.name) });
    },
  });
}

export function useDeletePreset() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (name: string) => api<Preset>(presetPath(name), { method: 'DELETE' }),
    onSuccess: (_, name) => {
      qc.removeQueries({ queryKey: keys.presetPlan(name) });
      void qc.invalidateQueries({ queryKey: keys.presets });
    },
  });
}

export function presetApplyPath(name: string): string {
  return `${presetPath(name)}/apply`;
}

/** The moves the leader holds, newest first. */
export function useMoves(enabled = true) {
  return useQuery({
    queryKey: keys.moves,
    queryFn: () => api<Move[]>('/api/cluster/moves'),
    enabled,
    refetchInterval: 2000,
  });
}

/** One move, asked for every second until it is done or failed. */
export function useMove(id: string | null) {
  return useQuery({
    queryKey: keys.move(id ?? ''),
    queryFn: () => api<Move>(`/api/cluster/moves/${encodeURIComponent(id ?? '')}`),
    enabled: id !== null,
    refetchInterval: (query) => movePollInterval(query.state.data),
  });
}

export function useStartMove() {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (body: MoveCreate) => api<Move>('/api/cluster/moves', { method: 'POST', body }),
    onSuccess: (move) => {
      qc.setQueryData(keys.move(move.id), move);
      void qc.invalidateQueries({ queryKey: keys.moves, exact: true });
    },
  });
}
