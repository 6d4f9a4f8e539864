import { Alert, Content, Label, Spinner } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { Move } from '../api/types';
import { useNow } from '../hooks/useNow';
import { formatDuration } from '../lib/format';
import { MOVE_STATE_COLOR, moveElapsed, moveFinished, moveRoute, moveTimeline } from '../lib/moves';

export function MoveStateLabel({ move }: { move: Pick<Move, 'state'> }) {
  return (
    <Label isCompact color={MOVE_STATE_COLOR[move.state] ?? 'grey'} data-testid="move-state" data-state={move.state}>
      {move.state}
    </Label>
  );
}

/** A move's steps as they happen, each with its time since the move began and since
 *  the step before (how long the target took to start, the drain, ...). */
export function MoveSteps({ move }: { move: Move }) {
  const now = useNow();
  const finished = moveFinished(move);
  const steps = moveTimeline(move);
  return (
    <div data-testid="move-steps" data-move-id={move.id} data-state={move.state}>
      <Content component="p">
        <strong>{move.model}</strong>: {moveRoute(move)} <MoveStateLabel move={move} />{' '}
        {!finished && <Spinner size="sm" aria-label="moving" />} {formatDuration(moveElapsed(move, now))}
        {finished ? ' in all' : ' so far'}
      </Content>
      {move.state === 'failed' && (
        <Alert isInline variant="danger" title={`The move failed${move.code ? ` (${move.code})` : ''}`} className="sz-mt-md">
          {move.reason ?? 'No reason given.'} The source instance kept serving unless a step below says otherwise.
        </Alert>
      )}
      {steps.length > 0 && (
        <Table aria-label={`Steps of move ${move.id}`} variant="compact" className="sz-mt-md">
          <Thead>
            <Tr>
              <Th>Step</Th>
              <Th modifier="fitContent">At</Th>
              <Th modifier="fitContent">Took</Th>
              <Th>Detail</Th>
            </Tr>
          </Thead>
          <Tbody>
            {steps.map((s, i) => (
              <Tr key={`${s.name}-${i}`} data-testid="move-step" data-step={s.name}>
                <Td dataLabel="Step" className="sz-mono">
                  {s.name}
                </Td>
                <Td dataLabel="At" modifier="nowrap">
                  +{formatDuration(s.offsetSeconds)}
                </Td>
                <Td dataLabel="Took" modifier="nowrap">
                  {formatDuration(s.tookSeconds)}
                </Td>
                <Td dataLabel="Detail" className="sz-wrap-anywhere">
                  {s.detail}
                </Td>
              </Tr>
            ))}
          </Tbody>
        </Table>
      )}
    </div>
  );
}
