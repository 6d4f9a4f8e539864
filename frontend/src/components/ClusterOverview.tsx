import { Content, Label } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { ClusterStatus } from '../api/types';
import { formatBytes } from '../lib/format';
import { orderedPods, POD_STATE_COLOR } from '../lib/cluster';
import { SimulatedLabel } from './StatusLabel';
import { Terms } from './Terms';

/** The seed's ClusterOverview: mode, leader, term and quorum, then one row per pod with
 *  its failure-detector state and GPU figures (as this pod last heard them). */
export function ClusterOverview({ status }: { status: ClusterStatus }) {
  const noLeader = status.leader === null;
  return (
    <>
      <Terms
        items={[
          ['Mode', <span data-testid="cluster-mode">{status.mode}</span>],
          [
            'Leader',
            <span data-testid="cluster-leader">
              {noLeader ? (
                <Label color="red" isCompact>
                  none: election under way, or no quorum (admin changes are refused)
                </Label>
              ) : (
                status.leader
              )}
            </span>,
          ],
          ['Term', <span data-testid="cluster-term">{status.term}</span>],
          ['Quorum', status.quorum !== undefined && status.size !== undefined ? `${status.quorum} of ${status.size} pods` : '—'],
          ['Answered by', status.podId ?? '—'],
        ]}
      />
      <Table aria-label="Pods" variant="compact" gridBreakPoint="grid-md" className="sz-mt-md">
        <Thead>
          <Tr>
            <Th>Pod</Th>
            <Th modifier="fitContent">Address</Th>
            <Th modifier="fitContent">State</Th>
            <Th>GPUs</Th>
            <Th modifier="fitContent">Instances</Th>
            <Th modifier="fitContent">Last heard</Th>
          </Tr>
        </Thead>
        <Tbody>
          {orderedPods(status).map((pod) => (
            <Tr key={pod.id} data-pod-id={pod.id} data-state={pod.state} data-leader={pod.isLeader ? 'true' : 'false'}>
              <Td dataLabel="Pod">
                <strong>{pod.id}</strong>{' '}
                {pod.isLeader && (
                  <Label color="blue" isCompact>
                    leader
                  </Label>
                )}{' '}
                {pod.self && (
                  <Label variant="outline" isCompact>
                    this pod
                  </Label>
                )}
              </Td>
              <Td dataLabel="Address" className="sz-mono">
                {pod.address}
              </Td>
              <Td dataLabel="State">
                <Label color={POD_STATE_COLOR[pod.state]} isCompact>
                  {pod.state}
                </Label>
              </Td>
              <Td dataLabel="GPUs">
                {pod.gpus.length === 0 && 'no GPU'}
                {pod.gpus.map((g) => (
                  <Content component="small" key={g.index} className="sz-nowrap" data-gpu-index={g.index}>
                    GPU {g.index} {g.name}: {formatBytes(g.usedBytes)} / {formatBytes(g.totalBytes)}
                    {g.simulated && (
                      <>
                        {' '}
                        <SimulatedLabel />
                      </>
                    )}
                    <br />
                  </Content>
                ))}
              </Td>
              <Td dataLabel="Instances">{pod.instances.length}</Td>
              <Td dataLabel="Last heard" modifier="nowrap">
                {pod.self ? 'now' : pod.lastSeenSecondsAgo == null ? 'never' : `${pod.lastSeenSecondsAgo.toFixed(1)} s ago`}
              </Td>
            </Tr>
          ))}
        </Tbody>
      </Table>
    </>
  );
}
