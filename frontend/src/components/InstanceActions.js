import { jsxs as _jsxs, jsx as _jsx, Fragment as _Fragment } from "react/jsx-runtime";
import { Button, Flex, FlexItem, Radio, Tooltip } from '@patternfly/react-core';
import { useState } from 'react';
import { useSleepModel, useUnloadModel, useWakeModel } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { ConfirmModal } from './ConfirmModal';
import { useNotify } from './Notifications';
export const NO_SLEEP_MODE = 'Loaded without sleep mode: load it again with “Enable sleep mode”.';
/** Sleep (level 1 or 2) or wake, and unload, each confirmed by a dialog that `dialogs`
 *  renders; null for read-only users. */
export function useInstanceActions(inst, onUnloaded) {
    const canMutate = useCanMutate();
    const notify = useNotify();
    const [pending, setPending] = useState(null);
    const [level, setLevel] = useState(1);
    const sleep = useSleepModel();
    const wake = useWakeModel();
    const unload = useUnloadModel();
    if (!canMutate)
        return null;
    const name = inst.servedModelName;
    const close = () => {
        setPending(null);
        sleep.reset();
        wake.reset();
        unload.reset();
    };
    const done = (message) => () => {
        notify('success', message);
        setPending(null);
    };
    const actions = [
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
    const dialogs = (_jsxs(_Fragment, { children: [pending === 'sleep' && (_jsxs(ConfirmModal, { title: `Put ${name} to sleep?`, confirmLabel: `Sleep (level ${level})`, busy: sleep.isPending, error: sleep.error, onCancel: close, onConfirm: () => sleep.mutate({ id: inst.id, level }, { onSuccess: done(`${name} is asleep (level ${level})`) }), children: [_jsxs("p", { children: ["Requests to ", name, " wait for it to wake (the proxy wakes it automatically)."] }), _jsx(Radio, { id: "sleep-level-1", name: "sleep-level", label: "Level 1: offload the weights to CPU RAM (fast wake-up)", isChecked: level === 1, onChange: () => setLevel(1) }), _jsx(Radio, { id: "sleep-level-2", name: "sleep-level", label: "Level 2: discard the weights (frees the most; slower wake-up)", isChecked: level === 2, onChange: () => setLevel(2) })] })), pending === 'wake' && (_jsx(ConfirmModal, { title: `Wake ${name}?`, confirmLabel: "Wake", busy: wake.isPending, error: wake.error, onCancel: close, onConfirm: () => wake.mutate(inst.id, { onSuccess: done(`${name} is awake`) }), children: _jsx("p", { children: "The engine takes its GPU memory back before it answers requests again." }) })), pending === 'unload' && (_jsx(ConfirmModal, { title: `Unload ${name}?`, confirmLabel: "Unload", danger: true, busy: unload.isPending, error: unload.error, onCancel: close, onConfirm: () => unload.mutate(inst.id, {
                    onSuccess: () => {
                        done(`${name} unloaded`)();
                        onUnloaded?.();
                    },
                }), children: inst.status === 'failed' ? (_jsx("p", { children: "The failed instance is removed from the list and whatever it still reserves is freed." })) : (_jsxs("p", { children: ["The engine on port ", inst.port, " is stopped and its GPU memory freed; requests for ", name, " fail until it is loaded again."] })) }))] }));
    return { actions, dialogs };
}
/** The instance page's buttons: sleep or wake, and unload, each confirmed; a disabled one
 *  says why in a tooltip. Nothing for read-only users. */
export function InstanceActions({ inst, onUnloaded }) {
    const own = useInstanceActions(inst, onUnloaded);
    if (!own)
        return null;
    return (_jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, flexWrap: { default: 'wrap' }, children: [own.actions.map((a) => {
                const button = (_jsx(Button, { size: "sm", variant: a.danger ? 'danger' : 'secondary', isAriaDisabled: a.disabledReason !== null, onClick: a.run, children: a.label }));
                return (_jsx(FlexItem, { children: a.disabledReason ? _jsx(Tooltip, { content: a.disabledReason, children: button }) : button }, a.key));
            }), own.dialogs] }));
}
