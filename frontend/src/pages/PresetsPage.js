import { jsxs as _jsxs, jsx as _jsx, Fragment as _Fragment } from "react/jsx-runtime";
import { Button, Card, CardBody, CardHeader, CardTitle, Content, DescriptionList, DescriptionListDescription, DescriptionListGroup, DescriptionListTerm, Flex, FlexItem, Label, PageSection, } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { useSearchParams } from 'react-router';
import { useDeletePreset, usePresetPlan, usePresets } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { ConfirmModal } from '../components/ConfirmModal';
import { useNotify } from '../components/Notifications';
import { PageHeader } from '../components/PageHeader';
import { PresetApplyPanel } from '../components/PresetApplyPanel';
import { PresetEditor } from '../components/PresetEditor';
import { PresetSteps } from '../components/PresetPlanView';
import { Empty, ErrorState, Loading } from '../components/States';
import { usePresetApply } from '../hooks/usePresetApply';
import { formatTimestamp } from '../lib/format';
import { planSummary } from '../lib/presets';
const RUN_COLOR = { done: 'green', failed: 'red', running: 'blue', cancelled: 'orange' };
function ReconcileSummary({ status }) {
    const run = status?.lastRun;
    const stuck = status?.unschedulable.length ?? 0;
    return (_jsxs("span", { "data-testid": "reconcile-summary", children: [run ? (_jsxs(Label, { isCompact: true, color: RUN_COLOR[run.state] ?? 'grey', children: ["last ", run.trigger, ": ", run.state] })) : (_jsx(Label, { isCompact: true, children: "no run yet" })), ' ', stuck > 0 && (_jsxs(Label, { isCompact: true, color: "red", children: [stuck, " unschedulable"] }))] }));
}
/** The applied preset's reconcile status: its last run's steps, what fits nowhere and why. */
function ReconcileCard({ preset }) {
    const status = preset.reconcile;
    const run = status?.lastRun;
    return (_jsxs(Card, { className: "sz-mt-md", "data-testid": "reconcile-card", children: [_jsxs(CardTitle, { children: ["Reconcile of ", preset.name] }), _jsxs(CardBody, { children: [_jsx(Content, { component: "p", children: "The leader keeps this preset true: it compares it with what the pods run every few seconds and when a pod joins or leaves, and loads or unloads the difference." }), _jsxs(DescriptionList, { isHorizontal: true, isCompact: true, className: "sz-mt-md", children: [_jsxs(DescriptionListGroup, { children: [_jsx(DescriptionListTerm, { children: "Applied" }), _jsx(DescriptionListDescription, { children: formatTimestamp(preset.appliedAt) })] }), _jsxs(DescriptionListGroup, { children: [_jsx(DescriptionListTerm, { children: "Last run" }), _jsx(DescriptionListDescription, { children: run ? `${run.trigger}, ${run.state}, ${formatTimestamp(run.startedAt)} – ${formatTimestamp(run.finishedAt)}` : 'none yet' })] }), (status?.consecutiveFailures ?? 0) > 0 && (_jsxs(DescriptionListGroup, { children: [_jsx(DescriptionListTerm, { children: "Failed passes in a row" }), _jsxs(DescriptionListDescription, { children: [status?.consecutiveFailures, " (backing off)"] })] }))] }), status && status.unschedulable.length > 0 && (_jsxs(_Fragment, { children: [_jsx(Content, { component: "h3", className: "sz-mt-md", children: "Unschedulable" }), _jsx(PresetSteps, { steps: status.unschedulable, label: "Unschedulable replicas" })] })), run && run.steps.length > 0 && (_jsxs(_Fragment, { children: [_jsx(Content, { component: "h3", className: "sz-mt-md", children: "Last run\u2019s steps" }), _jsx(PresetSteps, { steps: run.steps, label: "Last run" })] }))] })] }));
}
/** One preset: its plan now, Apply with live progress, and its reconcile status. */
function PresetDetail({ preset }) {
    const plan = usePresetPlan(preset.name);
    const { progress, apply, reset } = usePresetApply();
    const canMutate = useCanMutate();
    const busy = progress.phase === 'starting' || progress.phase === 'running';
    return (_jsxs(_Fragment, { children: [_jsxs(Card, { className: "sz-mt-md", "data-testid": "preset-plan", children: [_jsx(CardHeader, { actions: {
                            actions: (_jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, children: [_jsx(FlexItem, { children: _jsx(Button, { variant: "secondary", onClick: () => void plan.refetch(), isLoading: plan.isFetching, children: "Refresh plan" }) }), canMutate && (_jsx(FlexItem, { children: _jsx(Button, { variant: "primary", isLoading: busy, isDisabled: busy, onClick: () => {
                                                reset();
                                                apply(preset.name);
                                            }, children: "Apply" }) }))] })),
                        }, children: _jsxs(CardTitle, { children: ["Plan for ", preset.name] }) }), _jsxs(CardBody, { children: [plan.isPending && _jsx(Loading, { what: "the plan" }), plan.isError && _jsx(ErrorState, { what: "the plan", error: plan.error, onRetry: () => void plan.refetch() }), plan.data && (_jsxs(_Fragment, { children: [_jsxs(Content, { component: "p", "data-testid": "plan-summary", "data-nothing-to-do": String(plan.data.nothingToDo), children: [planSummary(plan.data), " ", _jsxs("small", { children: ["(strategy ", plan.data.strategy, ")"] })] }), plan.data.steps.length > 0 && _jsx(PresetSteps, { steps: plan.data.steps, label: `Plan for ${preset.name}` })] }))] })] }), progress.phase !== 'idle' && (_jsxs(Card, { className: "sz-mt-md", children: [_jsxs(CardTitle, { children: ["Apply ", preset.name] }), _jsx(CardBody, { children: _jsx(PresetApplyPanel, { progress: progress }) })] })), preset.applied && _jsx(ReconcileCard, { preset: preset })] }));
}
export default function PresetsPage() {
    const presets = usePresets();
    const canMutate = useCanMutate();
    const notify = useNotify();
    const del = useDeletePreset();
    const [params, setParams] = useSearchParams();
    const selectedName = params.get('preset');
    const [editing, setEditing] = useState(null);
    const [deleting, setDeleting] = useState(null);
    const select = (name) => setParams(name ? { preset: name } : {}, { replace: true });
    const selected = presets.data?.find((p) => p.name === selectedName);
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Presets", description: "Declared desired states of the cluster: which models, how many replicas. Plan shows what an apply would do; the applied preset is kept true by the leader.", actions: canMutate && (_jsx(Button, { variant: "primary", onClick: () => setEditing('new'), children: "New preset" })) }), _jsxs(PageSection, { children: [_jsx(Card, { children: _jsxs(CardBody, { children: [presets.isPending && _jsx(Loading, { what: "presets" }), presets.isError && _jsx(ErrorState, { what: "presets", error: presets.error, onRetry: () => void presets.refetch() }), presets.data?.length === 0 && (_jsx(Empty, { title: "No presets", children: canMutate ? 'Create one with “New preset”.' : 'An admin can create one.' })), presets.data && presets.data.length > 0 && (_jsxs(Table, { "aria-label": "Presets", variant: "compact", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Name" }), _jsx(Th, { children: "Models (replicas)" }), _jsx(Th, { modifier: "fitContent", children: "Status" }), _jsx(Th, { modifier: "fitContent", children: "Updated" }), _jsx(Th, { screenReaderText: "Actions", modifier: "fitContent" })] }) }), _jsx(Tbody, { children: presets.data.map((p) => (_jsxs(Tr, { "data-preset": p.name, "data-applied": String(p.applied), isRowSelected: p.name === selectedName, children: [_jsx(Td, { dataLabel: "Name", children: _jsx(Button, { variant: "link", isInline: true, onClick: () => select(p.name), children: p.name }) }), _jsx(Td, { dataLabel: "Models", children: p.models.map((m) => `${m.servedModelName} ×${m.replicas ?? 1}`).join(', ') || '—' }), _jsx(Td, { dataLabel: "Status", modifier: "nowrap", children: p.applied ? (_jsxs(_Fragment, { children: [_jsx(Label, { color: "blue", isCompact: true, children: "applied" }), ' ', _jsx(ReconcileSummary, { status: p.reconcile })] })) : (_jsx(Label, { isCompact: true, children: "not applied" })) }), _jsx(Td, { dataLabel: "Updated", modifier: "nowrap", children: formatTimestamp(p.updatedAt) }), _jsxs(Td, { dataLabel: "Actions", modifier: "nowrap", children: [_jsx(Button, { variant: "secondary", size: "sm", onClick: () => select(p.name), children: "Plan" }), ' ', canMutate && (_jsxs(_Fragment, { children: [_jsx(Button, { variant: "secondary", size: "sm", onClick: () => setEditing(p), children: "Edit" }), ' ', _jsx(Button, { variant: "danger", size: "sm", onClick: () => setDeleting(p), children: "Delete" })] }))] })] }, p.name))) })] }))] }) }), selected && _jsx(PresetDetail, { preset: selected }, selected.name)] }), editing && (_jsx(PresetEditor, { preset: editing === 'new' ? null : editing, onClose: () => setEditing(null), onSaved: (name) => {
                    notify('success', `Preset ${name} saved`);
                    setEditing(null);
                    select(name);
                } })), deleting && (_jsx(ConfirmModal, { title: `Delete preset ${deleting.name}?`, confirmLabel: "Delete", danger: true, busy: del.isPending, error: del.error, onCancel: () => {
                    setDeleting(null);
                    del.reset();
                }, onConfirm: () => del.mutate(deleting.name, {
                    onSuccess: () => {
                        notify('success', `Preset ${deleting.name} deleted`);
                        if (selectedName === deleting.name)
                            select(null);
                        setDeleting(null);
                    },
                }), children: _jsx("p", { children: deleting.applied
                        ? 'It is the applied preset: its reconciliation stops. What runs keeps running.'
                        : 'Nothing running is touched.' }) }))] }));
}
