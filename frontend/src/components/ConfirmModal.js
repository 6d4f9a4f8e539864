import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, Button, Modal, ModalBody, ModalFooter, ModalHeader } from '@patternfly/react-core';
/** "Are you sure?" for anything that stops or changes a running engine. */
export function ConfirmModal({ title, children, confirmLabel, danger = false, busy, error, onConfirm, onCancel }) {
    return (_jsxs(Modal, { isOpen: true, variant: "small", onClose: onCancel, "aria-labelledby": "confirm-title", children: [_jsx(ModalHeader, { title: title, labelId: "confirm-title", titleIconVariant: danger ? 'warning' : undefined }), _jsxs(ModalBody, { children: [children, error && (_jsx(Alert, { isInline: true, variant: "danger", title: error.message, className: "sz-mt-md" }))] }), _jsxs(ModalFooter, { children: [_jsx(Button, { variant: danger ? 'danger' : 'primary', onClick: onConfirm, isLoading: busy, isDisabled: busy, children: confirmLabel }), _jsx(Button, { variant: "link", onClick: onCancel, children: "Cancel" })] })] }));
}
