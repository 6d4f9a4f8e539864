import { Content, Label, List, ListItem, Spinner } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { PlanStep, RunStep } from '../api/types';
import { describeStep } from '../lib/presets';

const ACTION_COLOR = { load: 'blue', unload: 'orange', unschedulable: 'red' } as const;
const STATE_COLOR = { pending: 'grey', running: 'blue', done: 'green', failed: 'red' } as const;

function isRun(step: PlanStep | RunStep): step is RunStep {
  return 'state' in step;
}

/** Per pod, why it cannot take a replica (an unschedulable step, a 409's steps). */
export function PodReasons({ reasons }: { reasons: Array<[string, string]> }) {
  if (reasons.length === 0) return null;
  return (
    <List isPlain className="sz-mt-xs">
      {reasons.map(([pod, why]) => (
        <ListItem key={pod} data-pod-id={pod}>
          <Content component="small">
            <strong>{pod}</strong>: {why}
          </Content>
        </ListItem>
      ))}
    </List>
  );
}

/**
 * A preset's steps: a plan (what an apply would do) or a run (each step's state as the
 * apply goes). Loads say where and the scheduler's verdict, unloads why, unschedulable
 * replicas the reason per pod.
 */
export function PresetSteps({ steps, label }: { steps: Array<PlanStep | RunStep>; label: string }) {
  const run = steps.some(isRun);
  return (
    <Table aria-label={label} variant="compact">
      <Thead>
        <Tr>
          <Th modifier="fitContent">#</Th>
          <Th modifier="fitContent">Action</Th>
          <Th>Step</Th>
          {run && <Th modifier="fitContent">State</Th>}
        </Tr>
      </Thead>
      <Tbody>
        {steps.map((step, i) => {
          const text = describeStep(step);
          const state = isRun(step) ? step.state : undefined;
          return (
            <Tr key={i} data-testid="preset-step" data-action={step.action} data-state={state ?? 'planned'}>
              <Td dataLabel="#">{i + 1}</Td>
              <Td dataLabel="Action">
                <Label isCompact color={ACTION_COLOR[step.action] ?? 'grey'}>
                  {step.action}
                </Label>
              </Td>
              <Td dataLabel="Step">
                <strong>{text.title}</strong>
                {text.detail && (
                  <Content component="small" className="sz-wrap-anywhere">
                    {text.detail}
                  </Content>
                )}
                <PodReasons reasons={text.reasons} />
                {isRun(step) && step.error && (
                  <Content component="small" className="sz-error-text">
                    {step.code ? `${step.code}: ` : ''}
                    {step.error}
                  </Content>
                )}
              </Td>
              {run && (
                <Td dataLabel="State" modifier="nowrap">
                  {state === 'running' && <Spinner size="sm" aria-label="running" />}{' '}
                  <Label isCompact color={STATE_COLOR[state ?? 'pending'] ?? 'grey'} data-testid="preset-step-state">
                    {state ?? 'pending'}
                  </Label>
                </Td>
              )}
            </Tr>
          );
        })}
      </Tbody>
    </Table>
  );
}
