import {
  Alert,
  Card,
  CardBody,
  CardTitle,
  Flex,
  FlexItem,
  Gallery,
  PageSection,
} from '@patternfly/react-core';
import type { ReactNode } from 'react';
import { useNavigate, useParams } from 'react-router';
import { useAdapters } from '../api/adapters';
import { ApiError } from '../api/client';
import { useInstance, useInstanceMetrics } from '../api/queries';
import type { ModelInstance } from '../api/types';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { CreateProfileButton } from '../components/CreateProfileButton';
import { InstanceActions } from '../components/InstanceActions';
import { gpuText } from '../components/InstanceTable';
import { PageHeader } from '../components/PageHeader';
import { Terms } from '../components/Terms';
import { Empty, ErrorState, Loading } from '../components/States';
import { ManagedLabel, SimulatedLabel, StatusLabel } from '../components/StatusLabel';
import { formatBytes, formatDuration, formatGiB, formatNumber, formatTimestamp, formatUptime } from '../lib/format';
import { useNow } from '../hooks/useNow';
import { startingText } from '../lib/instanceRow';
import { heldBy, heldText } from '../lib/adapters';

function MemoryCard({ inst }: { inst: ModelInstance }) {
  const m = inst.memoryMetrics;
  if (!m) {
    return <Empty title="No memory figures yet">They are read from the engine's log once it has loaded.</Empty>;
  }
  return (
    <Terms
      items={[
        ['Weights', formatGiB(m.weightsMemoryGiB)],
        ['CUDA graphs', formatGiB(m.cudaGraphMemoryGiB)],
        ['KV cache available', formatGiB(m.kvCacheAvailableGiB)],
        ['KV cache per request', m.kvCachePerRequestMiB == null ? '—' : `${formatNumber(m.kvCachePerRequestMiB)} MiB`],
        ['KV cache tokens', formatNumber(m.kvCacheTokens)],
        ['Max model length', formatNumber(m.maxModelLen)],
        ['Max concurrency', m.maxConcurrency == null ? '—' : `${formatNumber(m.maxConcurrency)}×`],
        ['Weights load time', formatDuration(m.weightsLoadSeconds)],
        ['Engine init time', formatDuration(m.engineInitSeconds)],
      ]}
    />
  );
}

function baselines(inst: ModelInstance): string {
  const entries = Object.entries(inst.memoryBaselineBytesByGpu ?? {});
  return entries.length === 0 ? '—' : entries.map(([gpu, b]) => `GPU ${gpu}: ${formatBytes(b)}`).join(', ');
}

export default function InstancePage() {
  const { id = '' } = useParams();
  const query = useInstance(id);
  const navigate = useNavigate();
  const canMutate = useCanMutate();
  const now = useNow();
  // Which LoRA adapters it holds: from the adapters' view (heartbeats included), not the instance.
  const adapters = useAdapters();
  const held = heldBy(adapters.data ?? [], id);

  if (query.isPending) return <Loading what="the instance" />;
  if (query.isError) {
    if (query.error instanceof ApiError && query.error.status === 404) {
      return (
        <Empty title={`No instance ${id}`} actions={<ButtonLink to="/models">Back to Models</ButtonLink>}>
          It was unloaded, or the link is wrong.
        </Empty>
      );
    }
    return <ErrorState what="the instance" error={query.error} onRetry={() => void query.refetch()} />;
  }
  const inst = query.data;
  return (
    <>
      <PageHeader
        title={inst.servedModelName}
        description={
          <Flex spaceItems={{ default: 'spaceItemsSm' }}>
            <FlexItem>
              <StatusLabel status={inst.status} sleepLevel={inst.sleepLevel} />
            </FlexItem>
            {inst.status === 'starting' && (
              <FlexItem data-testid="instance-load-phase" data-load-phase={inst.loadPhase ?? undefined}>
                {startingText(inst, now)}
              </FlexItem>
            )}
            {inst.simulated && (
              <FlexItem>
                <SimulatedLabel what="simulated engine" />
              </FlexItem>
            )}
            {inst.managedBy && (
              <FlexItem>
                <ManagedLabel managedBy={inst.managedBy} />
              </FlexItem>
            )}
            {inst.displayName !== inst.servedModelName && <FlexItem>{inst.displayName}</FlexItem>}
          </Flex>
        }
        actions={
          <Flex spaceItems={{ default: 'spaceItemsSm' }}>
            <FlexItem>
              <ButtonLink to={`/logs/${inst.id}`} variant="secondary" size="sm">
                Logs
              </ButtonLink>
            </FlexItem>
            {canMutate && inst.status === 'active' && inst.memoryMetrics && (
              <FlexItem>
                <CreateProfileButton inst={inst} />
              </FlexItem>
            )}
            <FlexItem>
              <InstanceActions inst={inst} onUnloaded={() => void navigate('/models')} />
            </FlexItem>
          </Flex>
        }
      />
      {inst.status === 'failed' && (
        <PageSection>
          <Alert variant="danger" isInline title="This instance failed" data-testid="instance-error">
            <pre className="sz-mono sz-wrap-anywhere" style={{ whiteSpace: 'pre-wrap' }}>
              {inst.errorMessage ?? 'No error was found in the engine log: open Logs.'}
            </pre>
            Unload it to free its port, fix the cause, then load it again.
          </Alert>
        </PageSection>
      )}
      {inst.warnings.length > 0 && (
        <PageSection>
          {inst.warnings.map((w) => (
            <Alert key={w} variant="warning" isInline isPlain title={w} />
          ))}
        </PageSection>
      )}
      <PageSection>
        <Gallery hasGutter minWidths={{ default: '100%', lg: '30rem' }}>
          <Card>
            <CardTitle>Instance</CardTitle>
            <CardBody>
              <Terms
                items={[
                  ['ID', <span className="sz-mono">{inst.id}</span>],
                  ['Pod', <span data-testid="instance-pod">{inst.podId ?? 'this node'}</span>],
                  ['Model path', <span className="sz-wrap-anywhere">{inst.modelPath}</span>],
                  ['Engine', inst.engine],
                  ['GPU(s)', gpuText(inst)],
                  ['Port', inst.port],
                  ['PIDs', `API server ${inst.processId ?? '—'} · EngineCore ${inst.engineCorePid ?? '—'}`],
                  ['Created', formatTimestamp(inst.createdAt)],
                  ['Started', formatTimestamp(inst.startedAt)],
                  ['Uptime', inst.startedAt ? formatUptime(inst.startedAt, now) : '—'],
                  ['Sleep mode', inst.sleepModeEnabled ? `enabled${inst.sleptAt ? `, asleep since ${formatTimestamp(inst.sleptAt)}` : ''}` : 'disabled'],
                  ['Extra args', <code className="sz-wrap-anywhere">{inst.extraArgs.join(' ') || '—'}</code>],
                  ['Log file', <span className="sz-mono sz-wrap-anywhere">{inst.logFile ?? '—'}</span>],
                  ...(held.length ? [['LoRA adapters', <span data-testid="instance-adapters">{heldText(held)}</span>] as [string, ReactNode]] : []),
                ]}
              />
            </CardBody>
          </Card>
          <Card>
            <CardTitle>Memory</CardTitle>
            <CardBody>
              <Terms
                items={[
                  ['Memory limit', inst.gpuMemoryLimit == null ? 'automatic' : `${inst.gpuMemoryLimit} GB per GPU`],
                  ['Reserved per GPU', formatBytes(inst.reservedBytesPerGpu)],
                  ['gpu-memory-utilization', inst.gpuMemoryUtilization ?? '—'],
                  ['Baseline', baselines(inst)],
                  ['kvcached', inst.kvcachedEnabled ? `on (${inst.kvcachedIpcName ?? 'no segment'})` : 'off'],
                ]}
              />
              <div className="sz-mt-md">
                <MemoryCard inst={inst} />
              </div>
            </CardBody>
          </Card>
          <Card>
            <CardTitle>Traffic</CardTitle>
            <CardBody>
              <TrafficTerms id={inst.id} />
            </CardBody>
          </Card>
        </Gallery>
      </PageSection>
    </>
  );
}

/** The instance's ResourceMetrics, measured on its pod (any pod: the locator asks it). */
function TrafficTerms({ id }: { id: string }) {
  const metrics = useInstanceMetrics(id);
  if (metrics.isPending) return <Loading what="its metrics" />;
  if (metrics.isError) return <ErrorState what="its metrics" error={metrics.error} onRetry={() => void metrics.refetch()} />;
  const m = metrics.data;
  const ms = (v: number | null): string => (v == null ? '—' : `${formatNumber(v)} ms`);
  return (
    <div data-testid="instance-traffic">
      <Terms
        items={[
          ['Requests answered', formatNumber(m.requestCount)],
          ['In flight', formatNumber(m.activeConnections)],
          ['Latency p50 / p95', `${ms(m.avgResponseTime)} / ${ms(m.p95ResponseTime)}`],
          ['GPU memory used', formatBytes(m.gpuMemoryUsedBytes)],
          ['Measured', formatTimestamp(m.timestamp)],
        ]}
      />
    </div>
  );
}
