import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Alert, Button, Card, CardBody, CardHeader, CardTitle, Checkbox, Form, FormGroup, FormSelect, FormSelectOption, Grid, GridItem, Modal, ModalBody, ModalFooter, ModalHeader, TextArea, TextInput, } from '@patternfly/react-core';
import { useState } from 'react';
import { usePutPreset } from '../api/queries';
import { EMPTY_PRESET_MODEL, parseModelsJson, PRESET_NAME, toBody, toForm } from '../lib/presetForm';
import { errorAt, fieldErrors } from '../lib/presets';
import { FieldHelper as Helper } from './FieldHelper';
function ModelFields({ index, row, onChange, onRemove, errorOf, }) {
    const id = (f) => `preset-m${index}-${f}`;
    const at = (f) => errorOf(`models.${index}.${f}`);
    const set = (key, value) => onChange({ ...row, [key]: value });
    const text = (f, label, extra = {}) => (_jsxs(FormGroup, { label: label, fieldId: id(f), children: [_jsx(TextInput, { id: id(f), type: extra.type, value: row[f], placeholder: extra.placeholder, onChange: (_e, v) => set(f, v), validated: at(f) ? 'error' : 'default' }), _jsx(Helper, { error: at(f), children: extra.helper })] }));
    return (_jsxs(Card, { isCompact: true, className: "sz-mt-md", "data-testid": `preset-model-${index}`, children: [_jsx(CardHeader, { actions: {
                    actions: (_jsx(Button, { variant: "link", isDanger: true, size: "sm", onClick: onRemove, children: "Remove" })),
                }, children: _jsxs(CardTitle, { children: ["Model ", index + 1] }) }), _jsx(CardBody, { children: _jsxs(Grid, { hasGutter: true, md: 6, xl: 4, children: [_jsx(GridItem, { md: 12, xl: 8, children: text('modelPath', 'Model path', { placeholder: 'Qwen/Qwen3-8B or /models/qwen3-8b' }) }), _jsx(GridItem, { children: text('servedModelName', 'Served model name', { helper: 'The identity: instances of this name are the preset’s.' }) }), _jsx(GridItem, { children: text('replicas', 'Replicas', { type: 'number' }) }), _jsx(GridItem, { children: _jsxs(FormGroup, { label: "Engine", fieldId: id('engine'), children: [_jsxs(FormSelect, { id: id('engine'), value: row.engine, onChange: (_e, v) => set('engine', v), children: [_jsx(FormSelectOption, { value: "default", label: "Server default" }), _jsx(FormSelectOption, { value: "vllm", label: "vLLM" }), _jsx(FormSelectOption, { value: "sim", label: "Simulated" })] }), _jsx(Helper, { error: at('engine') })] }) }), _jsx(GridItem, { children: text('tensorParallelSize', 'Tensor parallel size', { type: 'number' }) }), _jsx(GridItem, { children: text('gpuType', 'GPU type', { placeholder: 'any (e.g. L4, *A100*80GB)' }) }), _jsx(GridItem, { children: text('minVramGiB', 'Minimum VRAM (GiB per GPU)', { type: 'number', placeholder: 'any' }) }), _jsx(GridItem, { children: _jsxs(FormGroup, { label: "Sleep level", fieldId: id('sleepLevel'), children: [_jsxs(FormSelect, { id: id('sleepLevel'), value: row.sleepLevel, onChange: (_e, v) => set('sleepLevel', v), children: [_jsx(FormSelectOption, { value: "0", label: "0: no sleep mode" }), _jsx(FormSelectOption, { value: "1", label: "1: sleep mode enabled" }), _jsx(FormSelectOption, { value: "2", label: "2: sleep mode enabled" })] }), _jsx(Helper, { error: at('sleepLevel') })] }) }), _jsx(GridItem, { md: 12, xl: 8, children: _jsxs(FormGroup, { label: "Extra engine arguments", fieldId: id('extraArgs'), children: [_jsx(TextInput, { id: id('extraArgs'), className: "sz-mono", value: row.extraArgs, placeholder: "--max-model-len 8192", onChange: (_e, v) => set('extraArgs', v), validated: at('extraArgs') ? 'error' : 'default' }), _jsx(Helper, { error: at('extraArgs') })] }) }), _jsx(GridItem, { children: _jsx(FormGroup, { label: "Pinned", fieldId: id('pinned'), role: "group", children: _jsx(Checkbox, { id: id('pinned'), label: "Pinned", isChecked: row.pinned, onChange: (_e, v) => set('pinned', v) }) }) })] }) })] }));
}
/** Create or edit a preset. What the browser cannot judge is left to the server: its
 *  422 names the field (`models.1.replicas`), and the message is shown there. */
export function PresetEditor({ preset, onClose, onSaved }) {
    const [name, setName] = useState(preset?.name ?? '');
    const [rows, setRows] = useState(preset ? preset.models.map(toForm) : [{ ...EMPTY_PRESET_MODEL }]);
    const [local, setLocal] = useState({});
    const put = usePutPreset();
    const server = fieldErrors(put.error);
    const errorOf = (field) => local[field] ?? errorAt(server, field);
    const nameError = local.name;
    const bodyError = errorAt(server, 'body') ?? errorAt(server, 'models');
    // The JSON editor: the same body as text (null: the form is shown).
    const [json, setJson] = useState(null);
    const [jsonError, setJsonError] = useState(null);
    const save = () => {
        const { body, errors } = json === null ? toBody(rows) : { body: null, errors: {} };
        if (!PRESET_NAME.test(name))
            errors.name = 'Letters, digits, ".", "_" and "-", starting with a letter or digit (at most 128).';
        setLocal(errors);
        put.reset();
        let models = body?.models ?? null;
        if (json !== null) {
            const parsed = parseModelsJson(json);
            setJsonError(parsed.error);
            models = parsed.models;
        }
        if (!models || errors.name)
            return;
        put.mutate({ name, models }, { onSuccess: (p) => onSaved(p.name) });
    };
    const toJson = () => {
        const { body, errors } = toBody(rows);
        setLocal(errors);
        if (body)
            setJson(JSON.stringify(body, null, 2));
    };
    const toFormView = () => {
        const parsed = parseModelsJson(json ?? '');
        setJsonError(parsed.error);
        if (!parsed.models)
            return;
        setRows(parsed.models.map(toForm));
        setJson(null);
        put.reset();
    };
    const update = (i, row) => {
        setRows((rs) => rs.map((r, j) => (j === i ? row : r)));
    };
    return (_jsxs(Modal, { isOpen: true, variant: "large", onClose: onClose, "aria-labelledby": "preset-edit-title", children: [_jsx(ModalHeader, { title: preset ? `Edit preset ${preset.name}` : 'New preset', labelId: "preset-edit-title" }), _jsxs(ModalBody, { children: [_jsx(Form, { id: "preset-form", onSubmit: (e) => {
                            e.preventDefault();
                            save();
                        }, children: _jsxs(FormGroup, { label: "Name", isRequired: true, fieldId: "preset-name", children: [_jsx(TextInput, { id: "preset-name", isRequired: true, value: name, isDisabled: preset !== null, onChange: (_e, v) => setName(v), validated: nameError ? 'error' : 'default' }), _jsx(Helper, { error: nameError, children: preset?.applied ? 'Applied: saving changes the desired state at once.' : undefined })] }) }), json === null ? (_jsxs(_Fragment, { children: [rows.map((row, i) => (_jsx(ModelFields, { index: i, row: row, errorOf: errorOf, onChange: (r) => update(i, r), onRemove: () => setRows((rs) => rs.filter((_, j) => j !== i)) }, i))), _jsx(Button, { variant: "secondary", className: "sz-mt-md", onClick: () => setRows((rs) => [...rs, { ...EMPTY_PRESET_MODEL }]), children: "Add model" }), ' ', _jsx(Button, { variant: "link", className: "sz-mt-md", onClick: toJson, children: "Edit as JSON" })] })) : (_jsxs(FormGroup, { label: "Preset (JSON)", fieldId: "preset-json", className: "sz-mt-md", children: [_jsx(TextArea, { id: "preset-json", className: "sz-mono", rows: 16, resizeOrientation: "vertical", value: json, onChange: (_e, v) => setJson(v), validated: jsonError || put.error ? 'error' : 'default' }), _jsxs(Helper, { error: jsonError ?? undefined, children: ["The body of PUT /api/cluster/presets/", '{name}', ": camelCase fields, as in docs/cluster.md."] }), Object.keys(server).length > 0 && (_jsx("ul", { className: "sz-error-text", "data-testid": "preset-json-errors", children: Object.entries(server).map(([field, messages]) => (_jsxs("li", { children: [_jsx("code", { children: field }), ": ", messages.join('; ')] }, field))) })), _jsx(Button, { variant: "link", onClick: toFormView, children: "Edit as form" })] })), put.error && (_jsx(Alert, { isInline: true, variant: "danger", title: "The server refused the preset", className: "sz-mt-md", "data-testid": "preset-save-error", children: bodyError ?? put.error.message }))] }), _jsxs(ModalFooter, { children: [_jsx(Button, { type: "submit", form: "preset-form", variant: "primary", isLoading: put.isPending, isDisabled: put.isPending, children: "Save" }), _jsx(Button, { variant: "link", onClick: onClose, children: "Cancel" })] })] }));
}
