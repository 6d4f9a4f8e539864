import { jsx as _jsx, Fragment as _Fragment, jsxs as _jsxs } from "react/jsx-runtime";
import { MenuToggle } from '@patternfly/react-core';
import { EllipsisVIcon } from '@patternfly/react-icons/dist/esm/icons/ellipsis-v-icon';
import { ActionsColumn } from '@patternfly/react-table';
import { useInstanceActions } from './InstanceActions';
import { useMoveAction } from './MoveAction';
/** The menu items of a row's actions: a disabled one stays in the menu and says why. */
export function rowMenuItems(actions) {
    return actions.map((a) => ({
        itemKey: a.key,
        title: a.label,
        isAriaDisabled: a.disabledReason !== null,
        description: a.disabledReason ?? undefined,
        isDanger: a.danger,
        // An aria-disabled item still gets the click: it must not open the dialog.
        onClick: () => {
            if (a.disabledReason === null)
                a.run();
        },
    }));
}
/** A models-table row's actions in a kebab menu: sleep or wake, unload (each confirmed by
 *  its dialog, rendered here) and move (its dialog lives in <MoveDialogHost/>, outside the
 *  row, since a move ends by unloading the source row). Nothing for read-only users. */
export function InstanceRowActions({ inst }) {
    const own = useInstanceActions(inst);
    const move = useMoveAction(inst);
    const actions = [...(own?.actions ?? []), ...(move ? [move] : [])];
    if (actions.length === 0)
        return null;
    return (_jsxs(_Fragment, { children: [_jsx(ActionsColumn, { items: rowMenuItems(actions), actionsToggle: ({ onToggle, isOpen, isDisabled, toggleRef }) => (_jsx(MenuToggle, { ref: toggleRef, "aria-label": `Actions for ${inst.servedModelName}`, variant: "plain", onClick: onToggle, isExpanded: isOpen, isDisabled: isDisabled, icon: _jsx(EllipsisVIcon, {}) })) }), own?.dialogs] }));
}
