import { Label, type LabelProps } from '@patternfly/react-core';
import type { InstanceStatus, ManagedBy } from '../api/types';
import { managedText } from '../lib/managed';

const COLORS: Record<InstanceStatus, NonNullable<LabelProps['color']>> = {
  starting: 'blue',
  active: 'green',
  sleeping: 'purple',
  stopping: 'orange',
  failed: 'red',
};

interface Props {
  status: InstanceStatus;
  sleepLevel?: number | null;
  /** Shown before the status: "2 active". */
  count?: number;
}

export function StatusLabel({ status, sleepLevel, count }: Props) {
  const base = status === 'sleeping' && sleepLevel ? `sleeping (level ${sleepLevel})` : status;
  const text = count === undefined ? base : `${count} ${base}`;
  return (
    <Label color={COLORS[status]} isCompact data-status={status}>
      {text}
    </Label>
  );
}

/** Marks anything that is not real hardware or a real engine. */
export function SimulatedLabel({ what = 'simulated' }: { what?: string }) {
  return (
    <Label color="yellow" isCompact variant="outline">
      {what}
    </Label>
  );
}

/** Marks an instance the applied preset or the catalog manages (an unload is undone). */
export function ManagedLabel({ managedBy }: { managedBy: ManagedBy }) {
  return (
    <Label color="teal" isCompact variant="outline" data-managed-by={managedBy.kind}>
      {managedText(managedBy)}
    </Label>
  );
}
