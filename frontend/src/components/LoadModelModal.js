import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, AlertActionLink, Button, Checkbox, Form, FormGroup, FormSelect, FormSelectOption, Grid, GridItem, Modal, ModalBody, ModalFooter, ModalHeader, TextInput, } from '@patternfly/react-core';
import { useState } from 'react';
import { ApiError } from '../api/client';
import { useClustered, useFitCheck, useGpus, useHealth, useLoadModel, useScheduleVerdict } from '../api/queries';
import { asGpuInfo, remotePod } from '../lib/cluster';
import { formatBytes } from '../lib/format';
import { EMPTY_LOAD_FORM, fitRequestFor, preAmpereWarnings, validateLoadForm } from '../lib/loadForm';
import { useDebounced } from '../hooks/useDebounced';
import { FitPanel } from './FitPanel';
import { useNotify } from './Notifications';
import { PodSelector } from './PodSelector';
import { SchedulerVerdict } from './SchedulerVerdict';
import { FieldHelper as Helper } from './FieldHelper';
/** Load a model: the form, a live fit check with its warnings, then Load. */
export function LoadModelModal({ onClose }) {
    const [form, setForm] = useState(EMPTY_LOAD_FORM);
    const [touched, setTouched] = useState(false);
    const gpus = useGpus();
    const health = useHealth();
    const load = useLoadModel();
    const notify = useNotify();
    const cluster = useClustered();
    const [podId, setPodId] = useState('');
    // Another pod's GPUs come from its heartbeat; the fit check only knows this pod's.
    const elsewhere = remotePod(cluster, podId);
    const { request, errors } = validateLoadForm(form);
    const fitQuestion = useDebounced(request ? fitRequestFor(request) : null, 400);
    const fit = useFitCheck(gpus.data?.available && !elsewhere ? fitQuestion : null);
    // "Any (scheduler)": where the leader's scheduler would put this load now (a dry run).
    const scheduling = cluster !== undefined && !podId;
    const verdict = useScheduleVerdict(useDebounced(scheduling ? request : null, 400));
    const set = (key, value) => {
        setForm((f) => ({ ...f, [key]: value }));
        load.reset();
    };
    const toggleGpu = (index, on) => set('gpuIds', on ? [...form.gpuIds, index] : form.gpuIds.filter((g) => g !== index));
    const gpuList = elsewhere ? elsewhere.gpus.map(asGpuInfo) : (gpus.data?.gpus ?? []);
    const warnGpus = form.gpuIds.length > 0 ? form.gpuIds : (fit.data?.chosenGpuIds ?? []);
    const warnings = request ? preAmpereWarnings(warnGpus, gpuList, request.extraArgs) : [];
    const demo = health.data?.mode === 'demo';
    const shown = (key) => (touched || key !== 'modelPath' ? errors[key] : undefined);
    const submit = (req) => {
        load.mutate(cluster && podId ? { ...req, podId } : req, {
            onSuccess: (inst) => {
                const where = inst.podId && cluster ? ` on pod ${inst.podId}` : '';
                notify('info', `Loading ${inst.servedModelName}`, `Instance ${inst.id} on port ${inst.port}${where} is starting.`);
                inst.warnings.forEach((w) => notify('warning', `${inst.servedModelName}: warning`, w));
                onClose();
            },
        });
    };
    const doesNotFit = load.error instanceof ApiError && load.error.code === 'model_does_not_fit';
    return (_jsxs(Modal, { isOpen: true, variant: "medium", onClose: onClose, "aria-labelledby": "load-title", children: [_jsx(ModalHeader, { title: "Load a model", labelId: "load-title" }), _jsxs(ModalBody, { children: [_jsxs(Form, { id: "load-form", onSubmit: (e) => {
                            e.preventDefault();
                            setTouched(true);
                            if (request)
                                submit(request);
                        }, children: [cluster && (_jsx(PodSelector, { status: cluster, value: podId, onChange: (v) => {
                                    setPodId(v);
                                    set('gpuIds', []); // GPU indexes are per pod
                                } })), _jsxs(FormGroup, { label: "Model path", isRequired: true, fieldId: "load-model-path", children: [_jsx(TextInput, { id: "load-model-path", isRequired: true, value: form.modelPath, onChange: (_e, v) => set('modelPath', v), placeholder: "/models/Qwen2.5-1.5B-Instruct or Qwen/Qwen2.5-1.5B-Instruct", validated: shown('modelPath') ? 'error' : 'default' }), _jsx(Helper, { error: shown('modelPath') })] }), _jsxs(Grid, { hasGutter: true, md: 4, children: [_jsx(GridItem, { children: _jsx(FormGroup, { label: "Served model name", fieldId: "load-served-name", children: _jsx(TextInput, { id: "load-served-name", value: form.servedModelName, onChange: (_e, v) => set('servedModelName', v), placeholder: "the model path" }) }) }), _jsx(GridItem, { children: _jsx(FormGroup, { label: "Display name", fieldId: "load-display-name", children: _jsx(TextInput, { id: "load-display-name", value: form.displayName, onChange: (_e, v) => set('displayName', v) }) }) }), _jsx(GridItem, { children: _jsx(FormGroup, { label: "Engine", fieldId: "load-engine", children: _jsxs(FormSelect, { id: "load-engine", value: form.engine, onChange: (_e, v) => set('engine', v), children: [_jsx(FormSelectOption, { value: "default", label: `Server default (${demo ? 'simulated' : 'vLLM'})` }), _jsx(FormSelectOption, { value: "vllm", label: "vLLM" }), _jsx(FormSelectOption, { value: "sim", label: "Simulated (no GPU work)" })] }) }) }), _jsx(GridItem, { children: _jsxs(FormGroup, { label: "Tensor parallel size", fieldId: "load-tp", children: [_jsx(TextInput, { id: "load-tp", type: "number", min: 1, max: 64, value: form.tensorParallelSize, onChange: (_e, v) => set('tensorParallelSize', v), validated: errors.tensorParallelSize ? 'error' : 'default' }), _jsx(Helper, { error: errors.tensorParallelSize })] }) }), _jsx(GridItem, { children: _jsxs(FormGroup, { label: "GPU memory limit (GB per GPU)", fieldId: "load-limit", children: [_jsx(TextInput, { id: "load-limit", type: "number", min: 0, step: "any", value: form.gpuMemoryLimit, onChange: (_e, v) => set('gpuMemoryLimit', v), placeholder: "automatic", validated: errors.gpuMemoryLimit ? 'error' : 'default' }), _jsx(Helper, { error: errors.gpuMemoryLimit })] }) }), _jsx(GridItem, { children: _jsx(FormGroup, { label: "Sleep mode", fieldId: "load-sleep", role: "group", children: _jsx(Checkbox, { id: "load-sleep", label: "Enable sleep mode", description: "Sleep and wake without reloading.", isChecked: form.enableSleepMode, onChange: (_e, v) => set('enableSleepMode', v) }) }) })] }), _jsxs(FormGroup, { label: "GPUs", fieldId: "load-gpus", role: "group", isInline: true, children: [gpuList.length === 0 && _jsxs("span", { children: ["No GPUs on ", elsewhere ? `pod ${elsewhere.id}` : 'this node', ": the engine runs on the CPU."] }), gpuList.map((g) => (_jsx(Checkbox, { id: `load-gpu-${g.index}`, label: `GPU ${g.index} · ${g.name}${g.simulated ? ' (simulated)' : ''} · ${formatBytes(g.freeBytes)} free`, isChecked: form.gpuIds.includes(g.index), onChange: (_e, on) => toggleGpu(g.index, on) }, g.index))), _jsx(Helper, { error: errors.gpuIds, children: gpuList.length > 0 ? 'None checked: automatic (the GPU with the most free memory).' : undefined })] }), _jsxs(FormGroup, { label: "Extra engine arguments", fieldId: "load-args", children: [_jsx(TextInput, { id: "load-args", value: form.extraArgs, onChange: (_e, v) => set('extraArgs', v), placeholder: "--max-model-len 8192", className: "sz-mono", validated: errors.extraArgs ? 'error' : 'default' }), _jsx(Helper, { error: errors.extraArgs, children: "Split into argv tokens like a shell (quotes allowed), never run by one. Simulated engine: --memory-gib 4 --load-seconds 2." })] })] }), _jsxs("div", { className: "sz-mt-md", "aria-live": "polite", children: [scheduling && _jsx(SchedulerVerdict, { verdict: verdict }), gpuList.length > 0 && !elsewhere && _jsx(FitPanel, { fit: fit, idleText: "Enter a model path to check whether it fits." }), warnings.map((w) => (_jsx(Alert, { isInline: true, isPlain: true, variant: "warning", title: "Pre-Ampere GPU", "data-testid": "load-warning", children: w }, w))), load.error && (_jsx(Alert, { isInline: true, variant: "danger", title: doesNotFit ? 'The server refused: the model will not fit' : 'The load was refused', actionLinks: doesNotFit &&
                                    request && _jsx(AlertActionLink, { onClick: () => submit({ ...request, force: true }), children: "Load anyway" }), children: load.error.message }))] })] }), _jsxs(ModalFooter, { children: [_jsx(Button, { type: "submit", form: "load-form", variant: "primary", isLoading: load.isPending, isDisabled: load.isPending, children: "Load" }), _jsx(Button, { variant: "link", onClick: onClose, children: "Cancel" })] })] }));
}
