import { Alert, Card, CardBody, CardTitle, Content } from '@patternfly/react-core';
import type { UseQueryResult } from '@tanstack/react-query';
import type { ReactNode } from 'react';
import { isMissingRoute } from '../api/client';
import type { EnginesReport, VllmReport } from '../api/types';
import { ErrorState, Loading } from './States';
import { Terms } from './Terms';

const SHUTDOWN_TIMEOUT = <code className="sz-nowrap">--shutdown-timeout</code>;

function Interpreter({ python }: { python: string }) {
  return (
    <span className="sz-mono sz-wrap-anywhere" data-testid="vllm-python">
      {python}
    </span>
  );
}

function vllmTerms(v: VllmReport): Array<[string, ReactNode]> {
  return [
    ['vLLM', <span data-testid="vllm-version">{v.version}</span>],
    [
      'Build',
      <span data-testid="vllm-build">
        {v.cpuBuild ? 'CPU' : 'CUDA'} build{v.distribution && <> (package <code>{v.distribution}</code>)</>}, runs on{' '}
        {v.device === 'cpu' ? 'the CPU' : 'CUDA GPUs'}
      </span>,
    ],
    ['Interpreter', <Interpreter python={v.python} />],
    ['Sleep mode', v.supportsSleep ? 'available (levels 1 and 2)' : 'not available on the CPU: it frees CUDA memory'],
    [
      'Unload',
      v.drainsOnStop
        ? <>drains: requests in flight finish first ({SHUTDOWN_TIMEOUT})</>
        : <>does not drain: requests in flight are cut off ({SHUTDOWN_TIMEOUT} needs vLLM 0.22 or newer)</>,
    ],
  ];
}

/** No vLLM behind SARDEENZ_VLLM_PYTHON: why, and what to do about it. */
function NoVllm({ error }: { error: string | null }) {
  return (
    <Alert isInline isPlain variant="info" title="vLLM not found" className="sz-mb-md" data-testid="vllm-not-found">
      <Content component="p" data-testid="vllm-error">
        {error ?? 'vllm is not installed for this interpreter'}
      </Content>
      <Content component="p">
        This node runs the simulated engine only. To run vLLM, point <code>SARDEENZ_VLLM_PYTHON</code> at the Python
        interpreter of a vLLM install and restart the node.
      </Content>
    </Alert>
  );
}

function Body({ engines }: { engines: UseQueryResult<EnginesReport, Error> }) {
  if (engines.isPending) return <Loading what="engines" />;
  if (engines.isError && isMissingRoute(engines.error)) return <>This server version does not report its engines.</>;
  if (engines.isError) return <ErrorState what="engines" error={engines.error} onRetry={() => void engines.refetch()} />;
  const { vllm, sim } = engines.data;
  const simTerm: [string, ReactNode] = ['Simulated engine', sim.available ? 'available (vLLM’s API, no model)' : 'not available'];
  if (vllm.found) return <Terms items={[...vllmTerms(vllm), simTerm]} />;
  return (
    <>
      <NoVllm error={vllm.error} />
      <Terms items={[['Interpreter', <Interpreter python={vllm.python} />], simTerm]} />
    </>
  );
}

/** What this node can launch: its vLLM install (`GET /api/v1/engines`) and the simulated engine. */
export function EnginesCard({ engines }: { engines: UseQueryResult<EnginesReport, Error> }) {
  return (
    <Card data-testid="engines-card">
      <CardTitle>Engines</CardTitle>
      <CardBody>
        <Body engines={engines} />
      </CardBody>
    </Card>
  );
}
