import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Button, Card, CardBody, Flex, FlexItem, Form, FormGroup, Modal, ModalBody, ModalFooter, ModalHeader, PageSection, TextInput, } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { isMissingRoute } from '../api/client';
import { useDeleteProfile, useFitCheck, useGpus, useInstances, useProfiles } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { ConfirmModal } from '../components/ConfirmModal';
import { CreateProfileModal, profileCandidates } from '../components/CreateProfileModal';
import { FitPanel } from '../components/FitPanel';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { useDebounced } from '../hooks/useDebounced';
import { formatGiB, formatNumber, formatTimestamp } from '../lib/format';
function FitCheckModal({ initial, onClose }) {
    const [modelPath, setModelPath] = useState(initial?.modelPath ?? '');
    const [maxTokens, setMaxTokens] = useState(initial ? String(initial.maxTokens) : '');
    const [tp, setTp] = useState('1');
    const gpus = useGpus();
    const question = modelPath.trim()
        ? {
            modelPath: modelPath.trim(),
            tensorParallelSize: Math.max(1, Number(tp) || 1),
            ...(Number(maxTokens) > 0 ? { maxTokens: Math.floor(Number(maxTokens)) } : {}),
        }
        : null;
    const fit = useFitCheck(useDebounced(question, 400));
    return (_jsxs(Modal, { isOpen: true, variant: "medium", onClose: onClose, "aria-labelledby": "fit-title", children: [_jsx(ModalHeader, { title: "Will it fit?", labelId: "fit-title", description: "Checked against the GPUs' free memory now." }), _jsxs(ModalBody, { children: [_jsxs(Form, { onSubmit: (e) => e.preventDefault(), children: [_jsx(FormGroup, { label: "Model path", fieldId: "fit-model", isRequired: true, children: _jsx(TextInput, { id: "fit-model", value: modelPath, onChange: (_e, v) => setModelPath(v) }) }), _jsxs(Flex, { children: [_jsx(FlexItem, { children: _jsx(FormGroup, { label: "Context length (max tokens)", fieldId: "fit-max-tokens", children: _jsx(TextInput, { id: "fit-max-tokens", type: "number", value: maxTokens, onChange: (_e, v) => setMaxTokens(v), placeholder: "model default" }) }) }), _jsx(FlexItem, { children: _jsx(FormGroup, { label: "Tensor parallel size", fieldId: "fit-tp", children: _jsx(TextInput, { id: "fit-tp", type: "number", min: 1, value: tp, onChange: (_e, v) => setTp(v) }) }) })] })] }), _jsx("div", { className: "sz-mt-md", children: gpus.data && !gpus.data.available ? (_jsx(Empty, { title: "No GPUs on this node", children: "There is no GPU memory to check against." })) : (_jsx(FitPanel, { fit: fit, idleText: "Enter a model path." })) })] }), _jsx(ModalFooter, { children: _jsx(Button, { variant: "primary", onClick: onClose, children: "Close" }) })] }));
}
export default function ProfilesPage() {
    const profiles = useProfiles();
    const instances = useInstances();
    const canMutate = useCanMutate();
    const remove = useDeleteProfile();
    const [dialog, setDialog] = useState(null);
    const candidates = profileCandidates(instances.data ?? []);
    const actions = canMutate && (_jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, children: [_jsx(FlexItem, { children: _jsx(Button, { variant: "secondary", onClick: () => setDialog({ kind: 'check', profile: null }), children: "Check fit" }) }), _jsx(FlexItem, { children: _jsx(Button, { variant: "primary", isAriaDisabled: candidates.length === 0, onClick: () => setDialog({ kind: 'create' }), children: "Create from instance" }) })] }));
    let body;
    if (profiles.isPending)
        body = _jsx(Loading, { what: "memory profiles" });
    else if (profiles.isError && isMissingRoute(profiles.error))
        body = _jsx(Empty, { title: "Memory profiles are not available on this server" });
    else if (profiles.isError)
        body = _jsx(ErrorState, { what: "memory profiles", error: profiles.error, onRetry: () => void profiles.refetch() });
    else if (profiles.data.length === 0) {
        body = (_jsxs(Empty, { title: "No memory profiles", children: ["A profile records what a model really took on a GPU; fit checks prefer it to estimates.", ' ', candidates.length > 0 ? 'Create one from a running instance.' : 'Load a model, then create one from it once it is active.'] }));
    }
    else {
        body = (_jsxs(Table, { "aria-label": "Memory profiles", variant: "compact", gridBreakPoint: "grid-lg", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { modifier: "wrap", children: "Name" }), _jsx(Th, { modifier: "wrap", children: "Model" }), _jsx(Th, { modifier: "wrap", children: "Max tokens" }), _jsx(Th, { modifier: "wrap", children: "Total" }), _jsx(Th, { modifier: "wrap", children: "Weights" }), _jsx(Th, { modifier: "wrap", children: "CUDA graphs" }), _jsx(Th, { modifier: "wrap", children: "Overhead" }), _jsx(Th, { modifier: "wrap", children: "KV cache" }), _jsx(Th, { modifier: "wrap", children: "GPU" }), _jsx(Th, { modifier: "wrap", children: "Created" }), canMutate && _jsx(Th, { screenReaderText: "Actions" })] }) }), _jsx(Tbody, { children: profiles.data.map((p) => (_jsxs(Tr, { "data-profile-id": p.id, children: [_jsx(Td, { dataLabel: "Name", children: p.profileName }), _jsx(Td, { dataLabel: "Model", className: "sz-wrap-anywhere", children: p.modelPath }), _jsx(Td, { dataLabel: "Max tokens", children: formatNumber(p.maxTokens) }), _jsx(Td, { dataLabel: "Total", children: formatGiB(p.totalGpuMemoryGib) }), _jsx(Td, { dataLabel: "Weights", children: formatGiB(p.weightsMemoryGib) }), _jsx(Td, { dataLabel: "CUDA graphs", children: formatGiB(p.cudaGraphsGib) }), _jsx(Td, { dataLabel: "Overhead", children: formatGiB(p.overheadMemoryGib) }), _jsxs(Td, { dataLabel: "KV cache", children: [formatGiB(p.kvCacheAvailableGib), p.kvCachePerRequestMib != null && ` (${formatNumber(p.kvCachePerRequestMib)} MiB/request)`] }), _jsxs(Td, { dataLabel: "GPU", children: [p.gpuName ?? '—', p.gpuTotalMemoryGib != null && ` (${formatGiB(p.gpuTotalMemoryGib)})`] }), _jsx(Td, { dataLabel: "Created", children: formatTimestamp(p.createdAt) }), canMutate && (_jsx(Td, { dataLabel: "Actions", children: _jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, flexWrap: { default: 'nowrap' }, children: [_jsx(Button, { variant: "link", size: "sm", onClick: () => setDialog({ kind: 'check', profile: p }), children: "Check fit" }), _jsx(Button, { variant: "link", isDanger: true, size: "sm", onClick: () => setDialog({ kind: 'delete', profile: p }), children: "Delete" })] }) }))] }, p.id))) })] }));
    }
    const close = () => {
        setDialog(null);
        remove.reset();
    };
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Memory profiles", description: "What models measured on real loads: the fit check uses them before estimates.", actions: actions }), _jsx(PageSection, { children: _jsx(Card, { children: _jsx(CardBody, { children: body }) }) }), dialog?.kind === 'create' && _jsx(CreateProfileModal, { candidates: candidates, onClose: close }), dialog?.kind === 'check' && _jsx(FitCheckModal, { initial: dialog.profile, onClose: close }), dialog?.kind === 'delete' && (_jsx(ConfirmModal, { title: `Delete profile “${dialog.profile.profileName}”?`, confirmLabel: "Delete", danger: true, busy: remove.isPending, error: remove.error, onCancel: close, onConfirm: () => remove.mutate(dialog.profile.id, { onSuccess: close }), children: _jsxs("p", { children: ["Fit checks for ", dialog.profile.modelPath, " fall back to other profiles or estimates."] }) }))] }));
}
