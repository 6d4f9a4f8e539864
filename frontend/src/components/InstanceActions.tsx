import { Button, Flex, FlexItem, Radio, Tooltip } from '@patternfly/react-core';
import { type ReactNode, useState } from 'react';
import { useSleepModel, useUnloadModel, useWakeModel } from '../api/queries';
import type { ModelInstance } from '../api/types';
import { useCanMutate } from '../auth/AuthContext';
import { unloadWarning } from '../lib/managed';
import { ConfirmModal } from './ConfirmModal';
import { useNotify } from './Notifications';

/** One action on an instance: a button on the instance page, a kebab item in the models table. */
export interface InstanceAction {
  key: 'sleep' | 'wake' | 'unload' | 'move';
  label: string;
  /** Why it cannot be done now (shown with the disabled action); null when it can. */
  disabledReason: string | null;
  danger?: boolean;
  /** Opens the action's confirmation (or its dialog); never acts at once. */
  run: () => void;
}

type Pending = 'sleep' | 'wake' | 'unload' | null;

export const NO_SLEEP_MODE = 'Loaded without sleep mode: load it again with “Enable sleep mode”.';

/** Sleep (level 1 or 2) or wake, and unload, each confirmed by a dialog that `dialogs`
 *  renders; null for read-only users. */
export function useInstanceActions(
  inst: ModelInstance,
  onUnloaded?: () => void,
): { actions: InstanceAction[]; dialogs: ReactNode } | null {
  const canMutate = useCanMutate();
  const notify = useNotify();
  const [pending, setPending] = useState<Pending>(null);
  const [level, setLevel] = useState<1 | 2>(1);
  const sleep = useSleepModel();
  const wake = useWakeModel();
  const unload = useUnloadModel();
  if (!canMutate) return null;

  const name = inst.servedModelName;
  const close = (): void => {
    setPending(null);
    sleep.reset();
    wake.reset();
    unload.reset();
  };
  const done = (message: string) => () => {
    notify('success', message);
    setPending(null);
  };

  const actions: InstanceAction[] = [
    inst.status === 'sleeping'
      ? { key: 'wake', label: 'Wake', disabledReason: null, run: () => setPending('wake') }
      : {
          key: 'sleep',
          label: 'Sleep',
          disabledReason: !inst.sleepModeEnabled
            ? NO_SLEEP_MODE
            : inst.status !== 'active'
              ? `Only an active instance can sleep (this one is ${inst.status}).`
              : null,
          run: () => setPending('sleep'),
        },
    {
      key: 'unload',
      label: 'Unload',
      danger: true,
      disabledReason: inst.status === 'stopping' ? 'It is already stopping.' : null,
      run: () => setPending('unload'),
    },
  ];

  const dialogs = (
    <>
      {pending === 'sleep' && (
        <ConfirmModal
          title={`Put ${name} to sleep?`}
          confirmLabel={`Sleep (level ${level})`}
          busy={sleep.isPending}
          error={sleep.error}
          onCancel={close}
          onConfirm={() => sleep.mutate({ id: inst.id, level }, { onSuccess: done(`${name} is asleep (level ${level})`) })}
        >
          <p>Requests to {name} wait for it to wake (the proxy wakes it automatically).</p>
          <Radio
            id="sleep-level-1"
            name="sleep-level"
            label="Level 1: offload the weights to CPU RAM (fast wake-up)"
            isChecked={level === 1}
            onChange={() => setLevel(1)}
          />
          <Radio
            id="sleep-level-2"
            name="sleep-level"
            label="Level 2: discard the weights (frees the most; slower wake-up)"
            isChecked={level === 2}
            onChange={() => setLevel(2)}
          />
        </ConfirmModal>
      )}
      {pending === 'wake' && (
        <ConfirmModal
          title={`Wake ${name}?`}
          confirmLabel="Wake"
          busy={wake.isPending}
          error={wake.error}
          onCancel={close}
          onConfirm={() => wake.mutate(inst.id, { onSuccess: done(`${name} is awake`) })}
        >
          <p>The engine takes its GPU memory back before it answers requests again.</p>
        </ConfirmModal>
      )}
      {pending === 'unload' && (
        <ConfirmModal
          title={`Unload ${name}?`}
          confirmLabel="Unload"
          danger
          busy={unload.isPending}
          error={unload.error}
          onCancel={close}
          onConfirm={() =>
            unload.mutate(inst.id, {
              onSuccess: () => {
                done(`${name} unloaded`)();
                onUnloaded?.();
              },
            })
          }
        >
          {inst.status === 'failed' ? (
            <p>The failed instance is removed from the list and whatever it still reserves is freed.</p>
          ) : (
            <p>
              The engine on port {inst.port} is stopped and its GPU memory freed; requests for {name} fail until it is
              loaded again.
            </p>
          )}
          {unloadWarning(inst.managedBy) && <p data-unload-warning>{unloadWarning(inst.managedBy)}</p>}
        </ConfirmModal>
      )}
    </>
  );
  return { actions, dialogs };
}

/** The instance page's buttons: sleep or wake, and unload, each confirmed; a disabled one
 *  says why in a tooltip. Nothing for read-only users. */
export function InstanceActions({ inst, onUnloaded }: { inst: ModelInstance; onUnloaded?: () => void }) {
  const own = useInstanceActions(inst, onUnloaded);
  if (!own) return null;
  return (
    <Flex spaceItems={{ default: 'spaceItemsSm' }} flexWrap={{ default: 'wrap' }}>
      {own.actions.map((a) => {
        const button = (
          <Button
            size="sm"
            variant={a.danger ? 'danger' : 'secondary'}
            isAriaDisabled={a.disabledReason !== null}
            onClick={a.run}
          >
            {a.label}
          </Button>
        );
        return (
          <FlexItem key={a.key}>
            {a.disabledReason ? <Tooltip content={a.disabledReason}>{button}</Tooltip> : button}
          </FlexItem>
        );
      })}
      {own.dialogs}
    </Flex>
  );
}
