import { Label, type LabelProps } from '@patternfly/react-core';
import type { RunStatus, ScenarioStatus } from '../api/types';

const COLORS: Record<RunStatus | ScenarioStatus, NonNullable<LabelProps['color']>> = {
  pending: 'grey',
  running: 'blue',
  completed: 'green',
  cancelled: 'orange',
  failed: 'red',
};

export function RunStatusLabel({ status }: { status: RunStatus | ScenarioStatus }) {
  return (
    <Label color={COLORS[status]} isCompact data-status={status}>
      {status}
    </Label>
  );
}
