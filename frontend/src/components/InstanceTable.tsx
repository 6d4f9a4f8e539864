import { Content } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { ReactNode } from 'react';
import { Link } from 'react-router';
import type { ModelInstance } from '../api/types';
import { formatUptime } from '../lib/format';
import { useNow } from '../hooks/useNow';
import { SimulatedLabel, StatusLabel } from './StatusLabel';

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

/** Every instance: name, status, engine, GPU(s), port, uptime. */
export function InstanceTable({ instances, actions, podOf }: Props) {
  const now = useNow();
  return (
    <Table aria-label="Model instances" variant="compact" gridBreakPoint="grid-md">
      <Thead>
        <Tr>
          <Th>Model</Th>
          <Th modifier="fitContent">Status</Th>
          {podOf && <Th modifier="fitContent">Pod</Th>}
          <Th modifier="fitContent">Engine</Th>
          <Th modifier="fitContent">GPU(s)</Th>
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
              <Content component="small" className="sz-wrap-anywhere">
                {inst.displayName !== inst.servedModelName ? `${inst.displayName} · ` : ''}
                {inst.id}
              </Content>
            </Td>
            <Td dataLabel="Status">
              <span>
                <StatusLabel status={inst.status} sleepLevel={inst.sleepLevel} />
              </span>
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
