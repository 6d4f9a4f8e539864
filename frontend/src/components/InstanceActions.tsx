import { Button, Flex, FlexItem, Radio, Tooltip } from '@patternfly/react-core';
import { useState } from 'react';
import { useSleepModel, useUnloadModel, useWakeModel } from '../api/queries';
import type { ModelInstance } from '../api/types';
import { useCanMutate } from '../auth/AuthContext';
import { ConfirmModal } from './ConfirmModal';
import { useNotify } from './Notifications';

type Pending = 'sleep' | 'wake' | 'unload' | null;

/** Sleep (level 1 or 2), wake and unload, each confirmed; nothing for read-only users. */
export function InstanceActions({ inst, onUnloaded }: { inst: ModelInstance; onUnloaded?: () => void }) {
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
  const sleepButton = (
    <Button
      size="sm"
      variant="secondary"
      isAriaDisabled={!inst.sleepModeEnabled || inst.status !== 'active'}
      onClick={() => setPending('sleep')}
    >
      Sleep
    </Button>
  );

  return (
    <Flex spaceItems={{ default: 'spaceItemsSm' }} flexWrap={{ default: 'wrap' }}>
      {inst.status === 'sleeping' ? (
        <FlexItem>
          <Button size="sm" variant="secondary" onClick={() => setPending('wake')}>
            Wake
          </Button>
        </FlexItem>
      ) : (
        <FlexItem>
          {inst.sleepModeEnabled ? (
            sleepButton
          ) : (
            <Tooltip content="Loaded without sleep mode: load it again with “Enable sleep mode”.">{sleepButton}</Tooltip>
          )}
        </FlexItem>
      )}
      <FlexItem>
        <Button size="sm" variant="danger" isAriaDisabled={inst.status === 'stopping'} onClick={() => setPending('unload')}>
          Unload
        </Button>
      </FlexItem>

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
        </ConfirmModal>
      )}
    </Flex>
  );
}
