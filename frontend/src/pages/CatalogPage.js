import { Fragment as _Fragment, jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, Button, Card, CardBody, Checkbox, Flex, FlexItem, Form, FormGroup, FormHelperText, FormSelect, FormSelectOption, Grid, GridItem, HelperText, HelperTextItem, Label, Modal, ModalBody, ModalFooter, ModalHeader, PageSection, TextInput, } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { Link } from 'react-router';
import { useCatalog, useDeleteCatalogEntry, usePutCatalogEntry } from '../api/catalog';
import { useCanMutate } from '../auth/AuthContext';
import { ConfirmModal } from '../components/ConfirmModal';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { useNotify } from '../components/Notifications';
import { useNow } from '../hooks/useNow';
import { EMPTY_CATALOG_FORM, entryFromForm, formFromModel, idleCountdown, serverFieldErrors, } from '../lib/catalogForm';
import { formatDuration } from '../lib/format';
const STATE_COLORS = {
    unloaded: 'grey',
    starting: 'blue',
    active: 'green',
    sleeping: 'purple',
    stopping: 'orange',
    failed: 'red',
    invalid: 'red',
    unreachable: 'orange',
};
function Ttl({ m, ageSeconds }) {
    // The server's idle clock is as old as the last fetch: count on from there.
    const idle = m.idleSeconds == null || m.state === 'starting' ? m.idleSeconds : m.idleSeconds + ageSeconds;
    const c = idleCountdown({ ...m, idleSeconds: idle ?? null });
    const e = m.entry;
    if (!e)
        return _jsx(_Fragment, { children: "\u2014" });
    if (e.pinned)
        return _jsx(_Fragment, { children: "never (pinned)" });
    if (c)
        return _jsx("span", { "data-countdown": c.action, children: c.seconds > 0 ? `${c.action} in ${formatDuration(c.seconds)}` : `${c.action} due` });
    const ttls = [
        e.idleSleepSeconds && (e.sleepLevel ?? 0) > 0 ? `sleep after ${formatDuration(e.idleSleepSeconds)}` : null,
        e.idleUnloadSeconds ? `unload after ${formatDuration(e.idleUnloadSeconds)}` : null,
    ].filter(Boolean);
    return _jsx(_Fragment, { children: ttls.length ? ttls.join(', ') + ' idle' : 'none' });
}
function Field({ id, label, error, help, children, required = false, }) {
    return (_jsxs(FormGroup, { label: label, fieldId: `cat-${id}`, isRequired: required, children: [children, (error || help) && (_jsx(FormHelperText, { children: _jsx(HelperText, { children: _jsx(HelperTextItem, { variant: error ? 'error' : 'default', id: `cat-${id}-help`, children: error ?? help }) }) }))] }));
}
function EntryModal({ initial, isNew, onClose }) {
    const [form, setForm] = useState(initial);
    const [errors, setErrors] = useState({});
    const [general, setGeneral] = useState(null);
    const put = usePutCatalogEntry();
    const notify = useNotify();
    const set = (key, value) => setForm((f) => ({ ...f, [key]: value }));
    const text = (key, label, opts = {}) => (_jsx(Field, { id: key, label: label, error: errors[key], help: opts.help, required: opts.required, children: _jsx(TextInput, { id: `cat-${key}`, type: opts.type ?? 'text', value: String(form[key]), onChange: (_e, v) => set(key, v), validated: errors[key] ? 'error' : 'default', "aria-describedby": `cat-${key}-help`, isDisabled: key === 'name' && !isNew }) }));
    const save = () => {
        const { entry, errors: local } = entryFromForm(form);
        setErrors(local);
        setGeneral(null);
        if (!entry)
            return;
        put.mutate({ name: form.name.trim(), entry }, {
            onSuccess: () => {
                notify('success', `Catalog entry ${form.name.trim()} saved`);
                onClose();
            },
            onError: (e) => {
                const mapped = serverFieldErrors(e);
                setErrors(mapped.fields);
                setGeneral(mapped.general);
            },
        });
    };
    return (_jsxs(Modal, { isOpen: true, variant: "medium", onClose: onClose, "aria-labelledby": "cat-title", children: [_jsx(ModalHeader, { title: isNew ? 'Add a catalog entry' : `Edit ${initial.name}`, labelId: "cat-title", description: "Checked like a load request. A running instance keeps running as it was loaded." }), _jsxs(ModalBody, { children: [_jsx(Form, { onSubmit: (e) => e.preventDefault(), children: _jsxs(Grid, { hasGutter: true, md: 6, children: [_jsx(GridItem, { children: text('name', 'Served model name', { required: true, help: 'What /v1 requests name' }) }), _jsx(GridItem, { children: text('modelPath', 'Model path', { required: true, help: 'HF id or folder' }) }), _jsx(GridItem, { children: _jsx(Field, { id: "engine", label: "Engine", error: errors.engine, children: _jsxs(FormSelect, { id: "cat-engine", value: form.engine, onChange: (_e, v) => set('engine', v), children: [_jsx(FormSelectOption, { value: "", label: "node default" }), _jsx(FormSelectOption, { value: "vllm", label: "vllm" }), _jsx(FormSelectOption, { value: "sim", label: "sim (simulated)" }), _jsx(FormSelectOption, { value: "external", label: "external (a server at a URL)" })] }) }) }), _jsx(GridItem, { children: text('url', 'URL (external only)') }), _jsx(GridItem, { children: text('aliases', 'Aliases', { help: 'Comma-separated' }) }), _jsx(GridItem, { children: text('gpuIds', 'GPU ids', { help: 'Empty: automatic placement' }) }), _jsx(GridItem, { children: text('gpuMemoryLimit', 'GPU memory limit (GB)', { type: 'number' }) }), _jsx(GridItem, { children: text('tensorParallelSize', 'Tensor parallel size', { type: 'number' }) }), _jsx(GridItem, { children: _jsx(Field, { id: "sleepLevel", label: "Sleep level", error: errors.sleepLevel, children: _jsxs(FormSelect, { id: "cat-sleepLevel", value: form.sleepLevel, onChange: (_e, v) => set('sleepLevel', v), children: [_jsx(FormSelectOption, { value: "0", label: "0: never sleep" }), _jsx(FormSelectOption, { value: "1", label: "1: weights to CPU RAM" }), _jsx(FormSelectOption, { value: "2", label: "2: discard weights" })] }) }) }), _jsx(GridItem, { children: text('idleSleepSeconds', 'Sleep after idle (s)', { type: 'number' }) }), _jsx(GridItem, { children: text('idleUnloadSeconds', 'Unload after idle (s)', { type: 'number' }) }), _jsx(GridItem, { children: text('extraArgs', 'Extra engine arguments') }), _jsxs(GridItem, { children: [_jsx(Checkbox, { id: "cat-pinned", label: "Pinned (never slept, unloaded or evicted)", isChecked: form.pinned, onChange: (_e, v) => set('pinned', v) }), _jsx(Checkbox, { id: "cat-preload", label: "Preload at server start", isChecked: form.preload, onChange: (_e, v) => set('preload', v) })] })] }) }), general && _jsx(Alert, { isInline: true, variant: "danger", title: general, className: "sz-mt-md" })] }), _jsxs(ModalFooter, { children: [_jsx(Button, { variant: "primary", onClick: save, isLoading: put.isPending, isDisabled: put.isPending, children: "Save" }), _jsx(Button, { variant: "link", onClick: onClose, children: "Cancel" })] })] }));
}
export default function CatalogPage() {
    const catalog = useCatalog();
    const canMutate = useCanMutate();
    const del = useDeleteCatalogEntry();
    const notify = useNotify();
    const now = useNow();
    const [editing, setEditing] = useState(null);
    const [deleting, setDeleting] = useState(null);
    const age = catalog.dataUpdatedAt ? Math.max(0, (now - catalog.dataUpdatedAt) / 1000) : 0;
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Catalog", description: "Models this node serves on demand: started by the first request, put to sleep or unloaded when idle.", actions: canMutate && (_jsx(Button, { variant: "primary", onClick: () => setEditing({ form: EMPTY_CATALOG_FORM, isNew: true }), children: "Add entry" })) }), _jsx(PageSection, { children: _jsx(Card, { children: _jsxs(CardBody, { children: [catalog.isPending && _jsx(Loading, { what: "the catalog" }), catalog.isError && _jsx(ErrorState, { what: "the catalog", error: catalog.error, onRetry: () => void catalog.refetch() }), catalog.data?.length === 0 && _jsx(Empty, { title: "The catalog is empty", children: "Add an entry, or list models in the config file." }), catalog.data && catalog.data.length > 0 && (_jsxs(Table, { "aria-label": "Catalog entries", variant: "compact", gridBreakPoint: "grid-md", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Name" }), _jsx(Th, { modifier: "fitContent", children: "State" }), _jsx(Th, { children: "Model" }), _jsx(Th, { modifier: "fitContent", children: "Idle TTL" }), _jsx(Th, { modifier: "fitContent", children: "Pinned" }), _jsx(Th, { modifier: "fitContent", children: "Source" }), canMutate && _jsx(Th, { screenReaderText: "Actions" })] }) }), _jsx(Tbody, { children: catalog.data.map((m) => (_jsxs(Tr, { "data-catalog-name": m.name, "data-state": m.state, children: [_jsxs(Td, { dataLabel: "Name", children: [_jsx("strong", { children: m.name }), m.entry?.aliases?.length ? _jsxs("div", { className: "sz-wrap-anywhere", children: ["aka ", m.entry.aliases.join(', ')] }) : null] }), _jsxs(Td, { dataLabel: "State", children: [_jsx(Label, { isCompact: true, color: STATE_COLORS[m.state], children: m.state }), m.error && _jsx("div", { className: "sz-failure-reason", children: m.error }), m.instanceIds.map((id) => (_jsx("div", { children: _jsx(Link, { to: `/models/${id}`, children: id.slice(0, 8) }) }, id)))] }), _jsx(Td, { dataLabel: "Model", className: "sz-wrap-anywhere", children: m.entry ? `${m.entry.modelPath} · ${m.entry.engine ?? 'default engine'}` : '—' }), _jsx(Td, { dataLabel: "Idle TTL", modifier: "nowrap", children: _jsx(Ttl, { m: m, ageSeconds: age }) }), _jsx(Td, { dataLabel: "Pinned", children: m.entry?.pinned ? 'pinned' : '—' }), _jsx(Td, { dataLabel: "Source", children: m.source === 'config' ? 'config file' : m.overridesConfig ? 'API (overrides config)' : 'API' }), canMutate && (_jsx(Td, { dataLabel: "Actions", children: _jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, flexWrap: { default: 'nowrap' }, children: [_jsx(FlexItem, { children: _jsx(Button, { variant: "secondary", size: "sm", onClick: () => setEditing({ form: formFromModel(m), isNew: false }), children: "Edit" }) }), m.source === 'api' && (_jsx(FlexItem, { children: _jsx(Button, { variant: "link", isDanger: true, size: "sm", onClick: () => setDeleting(m.name), children: "Delete" }) }))] }) }))] }, m.name))) })] }))] }) }) }), editing && _jsx(EntryModal, { initial: editing.form, isNew: editing.isNew, onClose: () => setEditing(null) }), deleting && (_jsx(ConfirmModal, { title: `Delete catalog entry ${deleting}?`, confirmLabel: "Delete", danger: true, busy: del.isPending, error: del.error, onCancel: () => setDeleting(null), onConfirm: () => del.mutate(deleting, {
                    onSuccess: () => {
                        notify('success', `Catalog entry ${deleting} deleted`);
                        setDeleting(null);
                    },
                }), children: _jsx("p", { children: "Running instances keep running; a config-file entry of this name applies again." }) }))] }));
}
