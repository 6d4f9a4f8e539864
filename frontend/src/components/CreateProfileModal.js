import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, Button, Form, FormGroup, FormSelect, FormSelectOption, Modal, ModalBody, ModalFooter, ModalHeader, TextArea, TextInput, } from '@patternfly/react-core';
import { useState } from 'react';
import { useCreateProfile } from '../api/queries';
import { useNotify } from './Notifications';
/** Save what a running instance measured as a memory profile (used by later fit checks). */
export function CreateProfileModal({ candidates, onClose }) {
    const [instanceId, setInstanceId] = useState(candidates[0]?.id ?? '');
    const [name, setName] = useState('');
    const [comments, setComments] = useState('');
    const create = useCreateProfile();
    const notify = useNotify();
    const chosen = candidates.find((c) => c.id === instanceId);
    const submit = () => {
        const body = { instanceId };
        if (name.trim())
            body.profileName = name.trim();
        if (comments.trim())
            body.comments = comments.trim();
        create.mutate(body, {
            onSuccess: (p) => {
                notify('success', `Saved profile “${p.profileName}”`);
                onClose();
            },
        });
    };
    return (_jsxs(Modal, { isOpen: true, variant: "small", onClose: onClose, "aria-labelledby": "profile-title", children: [_jsx(ModalHeader, { title: "Create a memory profile", labelId: "profile-title" }), _jsxs(ModalBody, { children: [_jsxs(Form, { id: "profile-form", onSubmit: (e) => {
                            e.preventDefault();
                            submit();
                        }, children: [_jsx(FormGroup, { label: "From instance", fieldId: "profile-instance", isRequired: true, children: _jsx(FormSelect, { id: "profile-instance", value: instanceId, onChange: (_e, v) => setInstanceId(v), children: candidates.map((c) => (_jsx(FormSelectOption, { value: c.id, label: `${c.servedModelName} (${c.id})` }, c.id))) }) }), _jsx(FormGroup, { label: "Profile name", fieldId: "profile-name", children: _jsx(TextInput, { id: "profile-name", value: name, onChange: (_e, v) => setName(v), placeholder: chosen ? `defaults to ${chosen.modelPath} and its context length` : '' }) }), _jsx(FormGroup, { label: "Comments", fieldId: "profile-comments", children: _jsx(TextArea, { id: "profile-comments", value: comments, onChange: (_e, v) => setComments(v), resizeOrientation: "vertical" }) })] }), create.error && _jsx(Alert, { isInline: true, variant: "danger", title: create.error.message, className: "sz-mt-md" })] }), _jsxs(ModalFooter, { children: [_jsx(Button, { type: "submit", form: "profile-form", isDisabled: !instanceId || create.isPending, isLoading: create.isPending, children: "Save profile" }), _jsx(Button, { variant: "link", onClick: onClose, children: "Cancel" })] })] }));
}
/** Instances a profile can be taken from. */
export function profileCandidates(instances) {
    return instances.filter((i) => i.status === 'active' && i.memoryMetrics !== null);
}
