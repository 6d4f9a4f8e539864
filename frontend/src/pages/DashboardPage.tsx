import { Card, CardBody, CardTitle, Flex, FlexItem, Gallery, PageSection } from '@patternfly/react-core';
import { useEffect } from 'react';
import { useClustered, useGpus, useInstances } from '../api/queries';
import type { InstanceStatus } from '../api/types';
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

function GpuCard() {
  const gpus = useGpus();
  const instances = useInstances();
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
  const cluster = useClustered();
  const instances = useInstances();
  const canMutate = useCanMutate();
  const ready = instances.isSuccess;

  useEffect(() => {
    if (ready) markOnce('sardeenz:dashboard-ready');
  }, [ready]);

  const counts = new Map<InstanceStatus, number>();
  for (const inst of instances.data ?? []) counts.set(inst.status, (counts.get(inst.status) ?? 0) + 1);

  return (
    <>
      <PageHeader title="Dashboard" description="Every engine on this node, its GPU memory and its traffic, live." />
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
