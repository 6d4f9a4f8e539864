import { Button, Card, CardBody, CardHeader, CardTitle, Content, Label } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { ClusterPod, ModelInstance } from '../api/types';
import { podGpuSummary, POD_STATE_COLOR } from '../lib/cluster';
import { gpuText } from './InstanceTable';
import { SimulatedLabel, StatusLabel } from './StatusLabel';

/** The seed's NodeModelPane: one pod, its GPUs and the instances it runs (from its last
 *  heartbeat; the leader's actions on them are on the Models page). `onMove`: a Move
 *  button on each active instance (admins). */
export function NodeModelPane({ pod, onMove }: { pod: ClusterPod; onMove?: (inst: ModelInstance) => void }) {
  return (
    <Card isCompact data-testid={`node-pane-${pod.id}`} data-state={pod.state}>
      <CardHeader>
        <CardTitle>
          {pod.id}{' '}
          <Label color={POD_STATE_COLOR[pod.state]} isCompact>
            {pod.state}
          </Label>{' '}
          {pod.isLeader && (
            <Label color="blue" isCompact>
              leader
            </Label>
          )}
        </CardTitle>
        <Content component="small">
          <span className="sz-mono">{pod.address}</span> · {podGpuSummary(pod.gpus)}
        </Content>
      </CardHeader>
      <CardBody>
        {pod.instances.length === 0 ? (
          <Content component="p">No instances on this pod.</Content>
        ) : (
          <Table aria-label={`Instances on ${pod.id}`} variant="compact">
            <Thead>
              <Tr>
                <Th>Model</Th>
                <Th modifier="fitContent">Status</Th>
                <Th modifier="fitContent">Engine</Th>
                <Th modifier="fitContent">GPU(s)</Th>
                {onMove && <Th screenReaderText="Actions" modifier="fitContent" />}
              </Tr>
            </Thead>
            <Tbody>
              {pod.instances.map((inst) => (
                <Tr key={inst.id} data-instance-id={inst.id} data-status={inst.status}>
                  <Td dataLabel="Model">
                    {inst.servedModelName}
                    <Content component="small" className="sz-wrap-anywhere">
                      {inst.id}
                    </Content>
                  </Td>
                  <Td dataLabel="Status">
                    <StatusLabel status={inst.status} sleepLevel={inst.sleepLevel} />
                  </Td>
                  <Td dataLabel="Engine" modifier="nowrap">
                    {inst.engine} {inst.simulated && <SimulatedLabel />}
                  </Td>
                  <Td dataLabel="GPU(s)" modifier="nowrap">
                    {gpuText(inst)}
                  </Td>
                  {onMove && (
                    <Td dataLabel="Actions">
                      <Button size="sm" variant="secondary" isAriaDisabled={inst.status !== 'active'} onClick={() => onMove(inst)}>
                        Move
                      </Button>
                    </Td>
                  )}
                </Tr>
              ))}
            </Tbody>
          </Table>
        )}
      </CardBody>
    </Card>
  );
}
