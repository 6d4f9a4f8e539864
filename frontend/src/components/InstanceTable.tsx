import { Content } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { ReactNode } from 'react';
import { Link } from 'react-router';
import { useAdapters } from '../api/adapters';
import type { ModelInstance } from '../api/types';
import { formatNumber, formatUptime } from '../lib/format';
import { useGpus } from '../api/queries';
import { heldBy, heldText } from '../lib/adapters';
import { failureReason, heldMemoryText, startingText } from '../lib/instanceRow';
import { useMetricsHistory } from '../hooks/MetricsHistory';
import { useNow } from '../hooks/useNow';
import { ManagedLabel, SimulatedLabel, StatusLabel } from './StatusLabel';

interface Props {
  instances: ModelInstance[];
  /** Extra cells per row (actions), with their column heading. */
  actions?: { heading: string; render: (inst: ModelInstance) => ReactNode };
  /** Cluster mode: a Pod column showing this pod id for each instance. */
  podOf?: (inst: ModelInstance) => string;
}

export function gpuText(inst: ModelInstance): string {
  if (inst.gpuIds.length === 0) return 'CPU';
  const tp = inst.tensorParallelSize > 1 ? ` (TP ${inst.tensorParallelSize})` : '';
  return `${inst.gpuIds.join(', ')}${tp}`;
}

/** Every instance: name (and the LoRA adapters it holds), status (why it failed; how far and how long it has been starting), engine,
 * GPU(s) and the memory it holds there, port, requests/s of its model, uptime; in a
 * cluster, the pod that runs it. */
export function InstanceTable({ instances, actions, podOf }: Props) {
  const now = useNow();
  const gpus = useGpus();
  const { points } = useMetricsHistory();
  const adapters = useAdapters().data ?? [];
  const rates = [...points].reverse().find((p) => p.models !== null)?.models ?? null;
  const rps = (model: string): string => {
    if (!rates) return '—';
    return formatNumber(rates.find((r) => r.model === model)?.requestsPerSecond ?? 0);
  };
  return (
    <Table aria-label="Model instances" variant="compact" gridBreakPoint="grid-md">
      <Thead>
        <Tr>
          <Th>Model</Th>
          <Th modifier="fitContent">Status</Th>
          {podOf && <Th modifier="fitContent">Pod</Th>}
          <Th modifier="fitContent">Engine</Th>
          <Th modifier="fitContent">GPU(s)</Th>
          {/* Reserved on all its GPUs together; req/s of its model (all its instances). */}
          <Th modifier="fitContent">GPU memory</Th>
          <Th modifier="fitContent">req/s</Th>
          <Th modifier="fitContent">Port</Th>
          <Th modifier="fitContent">Uptime</Th>
          {actions && <Th screenReaderText={actions.heading} modifier="fitContent" />}
        </Tr>
      </Thead>
      <Tbody>
        {instances.map((inst) => (
          <Tr key={inst.id} data-instance-id={inst.id} data-status={inst.status}>
            <Td dataLabel="Model">
              <Link to={`/models/${inst.id}`}>{inst.servedModelName}</Link>
              {inst.managedBy && (
                <>
                  {' '}
                  <ManagedLabel managedBy={inst.managedBy} />
                </>
              )}
              <Content component="small" className="sz-wrap-anywhere">
                {inst.displayName !== inst.servedModelName ? `${inst.displayName} · ` : ''}
                {inst.id}
              </Content>
              {heldBy(adapters, inst.id).length > 0 && (
                <Content component="small" className="sz-wrap-anywhere" data-instance-adapters>
                  LoRA: {heldText(heldBy(adapters, inst.id))}
                </Content>
              )}
            </Td>
            <Td dataLabel="Status">
              <span>
                <StatusLabel status={inst.status} sleepLevel={inst.sleepLevel} />
              </span>
              {inst.status === 'failed' && (
                <Content component="small" className="sz-failure-reason" title={inst.errorMessage ?? undefined} data-failure-reason>
                  {failureReason(inst)}
                </Content>
              )}
              {inst.status === 'starting' && (
                <Content component="small" className="sz-nowrap" data-starting-for data-load-phase={inst.loadPhase ?? undefined}>
                  {startingText(inst, now)}
                </Content>
              )}
            </Td>
            {podOf && (
              <Td dataLabel="Pod" modifier="nowrap" data-pod-id={podOf(inst)}>
                {podOf(inst)}
              </Td>
            )}
            <Td dataLabel="Engine" modifier="nowrap">
              <span>
                {inst.engine} {inst.simulated && <SimulatedLabel />}
              </span>
            </Td>
            <Td dataLabel="GPU(s)" modifier="nowrap">
              {gpuText(inst)}
            </Td>
            <Td dataLabel="GPU memory" modifier="nowrap" data-gpu-memory>
              {heldMemoryText(inst, gpus.data?.gpus, gpus.data?.budgets)}
            </Td>
            <Td dataLabel="req/s" modifier="nowrap">
              {inst.status === 'active' ? rps(inst.servedModelName) : '—'}
            </Td>
            <Td dataLabel="Port" className="sz-mono">
              {inst.port}
            </Td>
            <Td dataLabel="Uptime" modifier="nowrap">
              {inst.status === 'active' || inst.status === 'sleeping' ? formatUptime(inst.startedAt, now) : '—'}
            </Td>
            {actions && <Td dataLabel={actions.heading}>{actions.render(inst)}</Td>}
          </Tr>
        ))}
      </Tbody>
    </Table>
  );
}
