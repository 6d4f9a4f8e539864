import { Button, Card, CardBody, CardTitle, Content } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { isMissingRoute } from '../api/client';
import { useMoves } from '../api/queries';
import { useNow } from '../hooks/useNow';
import { formatDuration, formatTimestamp } from '../lib/format';
import { moveElapsed, moveRoute } from '../lib/moves';
import { MoveProgressModal } from './MoveModal';
import { MoveStateLabel } from './MoveSteps';

/** The moves the leader holds (newest first, kept in its memory): state and duration;
 *  a row opens the move's steps. */
export function MovesCard() {
  const moves = useMoves();
  const now = useNow();
  const [open, setOpen] = useState<string | null>(null);
  if (moves.isError && isMissingRoute(moves.error)) return null;
  return (
    <Card className="sz-mt-md" data-testid="moves-card">
      <CardTitle>Moves</CardTitle>
      <CardBody>
        {moves.isError && <Content component="p">Could not list the moves: {moves.error.message}</Content>}
        {moves.data?.length === 0 && (
          <Content component="p">No moves yet (the leader keeps the last 100 in memory). Start one with Move on an instance.</Content>
        )}
        {moves.data && moves.data.length > 0 && (
          <Table aria-label="Moves" variant="compact">
            <Thead>
              <Tr>
                <Th>Model</Th>
                <Th>From → to</Th>
                <Th modifier="fitContent">State</Th>
                <Th modifier="fitContent">Started</Th>
                <Th modifier="fitContent">Duration</Th>
                <Th screenReaderText="Steps" modifier="fitContent" />
              </Tr>
            </Thead>
            <Tbody>
              {moves.data.map((m) => (
                <Tr key={m.id} data-move-id={m.id} data-state={m.state}>
                  <Td dataLabel="Model">{m.model}</Td>
                  <Td dataLabel="From → to">{moveRoute(m)}</Td>
                  <Td dataLabel="State">
                    <MoveStateLabel move={m} />
                  </Td>
                  <Td dataLabel="Started" modifier="nowrap">
                    {formatTimestamp(m.createdAt)}
                  </Td>
                  <Td dataLabel="Duration" modifier="nowrap">
                    {formatDuration(moveElapsed(m, now))}
                  </Td>
                  <Td dataLabel="Steps">
                    <Button variant="link" isInline onClick={() => setOpen(m.id)}>
                      Steps
                    </Button>
                  </Td>
                </Tr>
              ))}
            </Tbody>
          </Table>
        )}
      </CardBody>
      {open && <MoveProgressModal moveId={open} onClose={() => setOpen(null)} />}
    </Card>
  );
}
