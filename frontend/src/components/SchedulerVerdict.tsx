import { Alert, Content, Spinner } from '@patternfly/react-core';
import type { UseQueryResult } from '@tanstack/react-query';
import { isMissingRoute } from '../api/client';
import type { ScheduleVerdict } from '../api/types';
import { PodReasons } from './PresetPlanView';

/** Per pod, why it cannot take the load, sorted by pod. */
export function verdictReasons(v: ScheduleVerdict): Array<[string, string]> {
  return Object.entries(v.reasons ?? {}).sort(([a], [b]) => a.localeCompare(b));
}

/** The scheduler's dry run for the load being typed with "Any (scheduler)": where it
 *  would go and what the chosen GPUs keep free, or why no pod can take it. */
export function SchedulerVerdict({ verdict }: { verdict: UseQueryResult<ScheduleVerdict, Error> }) {
  if (verdict.fetchStatus === 'idle' && verdict.isPending) {
    return <Content component="small">Enter a model path to see where the scheduler would place it.</Content>;
  }
  if (verdict.isFetching && !verdict.data) {
    return (
      <Content component="small">
        <Spinner size="sm" aria-label="Asking the scheduler" /> Asking the scheduler…
      </Content>
    );
  }
  if (verdict.isError) {
    const text = isMissingRoute(verdict.error)
      ? 'This server has no scheduler dry run.'
      : `The scheduler could not be asked: ${verdict.error.message}`;
    return <Alert isInline isPlain variant="warning" title={text} />;
  }
  const v = verdict.data;
  if (!v) return null;
  return (
    <Alert
      isInline
      isPlain
      variant={v.placed ? 'info' : 'danger'}
      title={v.placed ? `Scheduler: ${v.verdict}` : `Scheduler: no pod can take it (${v.strategy})`}
      data-testid="schedule-verdict"
      data-placed={String(v.placed)}
      data-pod-id={v.podId ?? ''}
    >
      {!v.placed && (
        <>
          {/* The verdict repeats every pod's reason: the list says it better. */}
          {verdictReasons(v).length === 0 && <Content component="small">{v.verdict}</Content>}
          <PodReasons reasons={verdictReasons(v)} />
        </>
      )}
      {v.placed && <Content component="small">Strategy {v.strategy}; the pod’s own ledger still admits the load.</Content>}
    </Alert>
  );
}
