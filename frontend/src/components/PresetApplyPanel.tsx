import { Alert, Content, Label, Spinner } from '@patternfly/react-core';
import { ApiError } from '../api/client';
import type { ApplyProgress } from '../lib/presets';
import { refusedSteps } from '../lib/presets';
import { PresetSteps } from './PresetPlanView';

const OUTCOME_COLOR: Record<string, 'green' | 'red' | 'orange'> = { done: 'green', failed: 'red', cancelled: 'orange' };

/** The refusals an apply can get, in words an operator can act on. */
function ApplyRefused({ error }: { error: Error }) {
  if (error instanceof ApiError && error.code === 'preset_unschedulable') {
    return (
      <Alert isInline variant="danger" title="Not applied: a replica fits nowhere (nothing was done)" data-testid="apply-refused" data-code={error.code}>
        {refusedSteps(error).length > 0 ? (
          <PresetSteps steps={refusedSteps(error)} label="Replicas that fit nowhere" />
        ) : (
          <Content component="p">{error.message}</Content>
        )}
      </Alert>
    );
  }
  if (error instanceof ApiError && error.code === 'preset_apply_in_progress') {
    return (
      <Alert isInline variant="warning" title="Another apply or reconcile pass is running" data-testid="apply-refused" data-code={error.code}>
        {error.message} Wait for it to end (the preset’s last run shows it), then apply again.
      </Alert>
    );
  }
  const code = error instanceof ApiError ? error.code : undefined;
  return (
    <Alert isInline variant="danger" title="The apply failed" data-testid="apply-refused" data-code={code}>
      {error.message}
    </Alert>
  );
}

/** An apply as it goes: each step's state from the stream, then the outcome. */
export function PresetApplyPanel({ progress }: { progress: ApplyProgress }) {
  const { phase, steps, outcome, error } = progress;
  if (phase === 'idle') return null;
  return (
    <div data-testid="apply-progress" data-phase={phase} data-outcome={outcome?.state ?? ''}>
      {phase === 'starting' && <Spinner size="md" aria-label="Starting the apply" />}
      {error && error.message && <ApplyRefused error={error} />}
      {steps.length > 0 && <PresetSteps steps={steps} label="Apply progress" />}
      {phase === 'running' && steps.length === 0 && <Content component="p">Planning…</Content>}
      {outcome && (
        <Content component="p" className="sz-mt-md">
          <Label color={OUTCOME_COLOR[outcome.state] ?? 'grey'} data-testid="apply-outcome">
            {outcome.state}
          </Label>{' '}
          {outcome.steps === 0
            ? 'Nothing to do: the cluster already ran what the preset declares.'
            : `${outcome.steps} step${outcome.steps > 1 ? 's' : ''}, ${outcome.failed} failed.`}
          {outcome.failed > 0 && ' Apply again to retry what is missing (only that is done).'}
        </Content>
      )}
    </div>
  );
}
