import { Card, CardBody, CardTitle, CodeBlock, CodeBlockCode, Content, Gallery, PageSection } from '@patternfly/react-core';
import { useState } from 'react';
import { useClusterStatus } from '../api/queries';
import type { ModelInstance } from '../api/types';
import { useCanMutateIfKnown } from '../auth/AuthContext';
import { MoveModal } from '../components/MoveModal';
import { MovesCard } from '../components/MovesCard';
import { ClusterOverview } from '../components/ClusterOverview';
import { NodeModelPane } from '../components/NodeModelPane';
import { PageHeader } from '../components/PageHeader';
import { ErrorState, Loading } from '../components/States';
import { orderedPods } from '../lib/cluster';

const FORM_A_CLUSTER = `# on every node, the same list (each node may be in it) and the same secret:
CLUSTER_PEERS=10.0.0.1:3000,10.0.0.2:3000,10.0.0.3:3000
CLUSTER_SECRET=<at least 32 random characters>
POD_NAME=node-1            # optional: a stable pod id
sardeenz serve --host 0.0.0.0`;

/** The single-node explanation: what this node is and how to make it a cluster. */
function SingleNode({ podId }: { podId: string | undefined }) {
  return (
    <Card data-testid="cluster-single">
      <CardTitle>Single node</CardTitle>
      <CardBody>
        <Content component="p">
          This node{podId ? ` (${podId})` : ''} runs alone: it serves its own models and has no peers. To form a cluster,
          start every node with the same peer list and secret; the nodes then elect a leader, share one routing table
          (any node answers <code>/v1</code> for a model served by another) and this page lists them all.
        </Content>
        <CodeBlock className="sz-mt-md">
          <CodeBlockCode>{FORM_A_CLUSTER}</CodeBlockCode>
        </CodeBlock>
        <Content component="p" className="sz-mt-md">
          In Kubernetes the pods find each other through the API server instead. See <code>docs/cluster.md</code>.
        </Content>
      </CardBody>
    </Card>
  );
}

export default function ClusterPage() {
  const status = useClusterStatus();
  const s = status.data;
  const canMutate = useCanMutateIfKnown();
  const [moving, setMoving] = useState<{ inst: ModelInstance; podId: string } | null>(null);
  return (
    <>
      <PageHeader
        title="Cluster"
        description="The pods, their leader and what each one runs, as this pod sees them (refreshed every 2 s)."
      />
      <PageSection>
        {status.isPending && <Loading what="the cluster status" />}
        {status.isError && <ErrorState what="the cluster status" error={status.error} onRetry={() => void status.refetch()} />}
        {s?.mode === 'single' && <SingleNode podId={s.podId} />}
        {s && s.mode !== 'single' && (
          <>
            <Card>
              <CardTitle>Overview</CardTitle>
              <CardBody>
                <ClusterOverview status={s} />
              </CardBody>
            </Card>
            <Gallery hasGutter minWidths={{ default: '100%', xl: '36rem' }} className="sz-mt-md">
              {orderedPods(s).map((pod) => (
                <NodeModelPane
                  key={pod.id}
                  pod={pod}
                  onMove={canMutate && s.leader !== null ? (inst) => setMoving({ inst, podId: pod.id }) : undefined}
                />
              ))}
            </Gallery>
            <MovesCard />
          </>
        )}
        {moving && s && <MoveModal inst={moving.inst} podId={moving.podId} status={s} onClose={() => setMoving(null)} />}
      </PageSection>
    </>
  );
}
