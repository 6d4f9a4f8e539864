import { Card, CardBody, CardTitle, Flex, FlexItem, Gallery, Label, PageSection, Title } from '@patternfly/react-core';
import { useEffect } from 'react';
import { useClustered, useGpus, useInstances } from '../api/queries';
import type { ClusterPod, ClusterStatus, GpuReport, InstanceStatus } from '../api/types';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { GpuMemoryBars } from '../components/GpuMemoryBars';
import { InstanceTable } from '../components/InstanceTable';
import { PageHeader } from '../components/PageHeader';
import { RequestSummary } from '../components/RequestSummary';
import { Empty, ErrorState, Loading } from '../components/States';
import { StatusLabel } from '../components/StatusLabel';
import { markOnce } from '../lib/perf';

const STATUSES: InstanceStatus[] = ['active', 'starting', 'sleeping', 'stopping', 'failed'];

/** Another pod's GPUs as its heartbeat gives them (no per-process budget: that stays on the pod). */
function podReport(pod: ClusterPod): GpuReport {
  return {
    available: pod.gpus.length > 0,
    simulated: pod.gpus.some((g) => g.simulated),
    reason: null,
    budgets: [],
    gpus: pod.gpus.map((g) => ({
      ...g,
      uuid: '',
      utilizationPercent: null,
      computeCapability: null,
      processes: [],
      simulated: g.simulated ?? false,
    })),
  };
}

/** Every pod's GPUs: this pod's from its own report (with budgets), the others' from the
 * cluster status their heartbeats fill. */
function ClusterGpus({ cluster, local }: { cluster: ClusterStatus; local: GpuReport | undefined }) {
  return (
    <>
      {cluster.pods.map((pod) => {
        const report = pod.self && local ? local : podReport(pod);
        return (
          <section key={pod.id} data-testid="pod-gpus" data-pod-id={pod.id} className="pf-v6-u-mb-md">
            <Title headingLevel="h3" size="md">
              {pod.id} {pod.self && <Label isCompact>this pod</Label>} {pod.isLeader && <Label isCompact color="blue">leader</Label>}{' '}
              {pod.state !== 'healthy' && <Label isCompact color="orange">{pod.state}</Label>}
            </Title>
            {report.gpus.length === 0 ? (
              <small>No GPUs on this pod.</small>
            ) : (
              <GpuMemoryBars report={report} instances={pod.instances} />
            )}
          </section>
        );
      })}
    </>
  );
}

function GpuCard() {
  const gpus = useGpus();
  const instances = useInstances();
  const cluster = useClustered();
  if (cluster) return <ClusterGpus cluster={cluster} local={gpus.data} />;
  if (gpus.isPending) return <Loading what="GPUs" />;
  if (gpus.isError) return <ErrorState what="GPUs" error={gpus.error} onRetry={() => void gpus.refetch()} />;
  if (!gpus.data.available || gpus.data.gpus.length === 0) {
    return (
      <Empty title="No GPUs on this node">
        {gpus.data.reason ?? 'The NVIDIA driver reports none.'} Engines run on the CPU; start the server with
        --sim-gpus to try placement with simulated GPUs.
      </Empty>
    );
  }
  return <GpuMemoryBars report={gpus.data} instances={instances.data ?? []} />;
}

export function DashboardPage() {
  const instances = useInstances();
  const canMutate = useCanMutate();
  const cluster = useClustered();
  const ready = instances.isSuccess;

  useEffect(() => {
    if (ready) markOnce('sardeenz:dashboard-ready');
  }, [ready]);

  const counts = new Map<InstanceStatus, number>();
  for (const inst of instances.data ?? []) counts.set(inst.status, (counts.get(inst.status) ?? 0) + 1);

  return (
    <>
      <PageHeader
        title="Dashboard"
        description={
          cluster
            ? `Every engine of the ${cluster.pods.length}-pod cluster, every pod's GPU memory and the cluster's traffic, live.`
            : 'Every engine on this node, its GPU memory and its traffic, live.'
        }
      />
      <PageSection>
        <Gallery hasGutter minWidths={{ default: '100%', lg: 'calc(50% - var(--pf-t--global--spacer--gutter--default))' }}>
          <Card>
            <CardTitle>GPU memory</CardTitle>
            <CardBody>
              <GpuCard />
            </CardBody>
          </Card>
          <Card>
            <CardTitle>Requests</CardTitle>
            <CardBody>
              <RequestSummary />
            </CardBody>
          </Card>
        </Gallery>
      </PageSection>
      <PageSection>
        <Card>
          <CardTitle>
            <Flex spaceItems={{ default: 'spaceItemsSm' }} alignItems={{ default: 'alignItemsCenter' }}>
              <FlexItem>Instances</FlexItem>
              {STATUSES.filter((s) => counts.has(s)).map((s) => (
                <FlexItem key={s}>
                  <StatusLabel status={s} count={counts.get(s) ?? 0} />
                </FlexItem>
              ))}
            </Flex>
          </CardTitle>
          <CardBody>
            {instances.isPending && <Loading what="instances" />}
            {instances.isError && (
              <ErrorState what="instances" error={instances.error} onRetry={() => void instances.refetch()} />
            )}
            {instances.data?.length === 0 && (
              <Empty
                title="No models loaded"
                actions={
                  canMutate && (
                    <ButtonLink to="/models?load=1" variant="primary">
                      Load a model
                    </ButtonLink>
                  )
                }
              >
                Load one from the Models page; it appears here as it starts.
              </Empty>
            )}
            {instances.data && instances.data.length > 0 && (
              <InstanceTable
                instances={instances.data}
                // The pod's own instances may come without podId (its event stream): they are its.
                podOf={cluster && ((inst) => inst.podId ?? cluster.podId ?? '—')}
              />
            )}
          </CardBody>
        </Card>
      </PageSection>
    </>
  );
}
