import { jsxs as _jsxs, jsx as _jsx, Fragment as _Fragment } from "react/jsx-runtime";
import { ActionGroup, Alert, Button, Card, CardBody, CardHeader, CardTitle, Form, FormGroup, FormHelperText, FormSelect, FormSelectOption, Grid, GridItem, HelperText, HelperTextItem, PageSection, TextInput, } from '@patternfly/react-core';
import { useState } from 'react';
import { useNavigate } from 'react-router';
import { useCreateBenchmark, useInstances } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { PageHeader } from '../components/PageHeader';
import { Empty, Loading } from '../components/States';
import { defaultScenario, validateRun } from '../lib/benchmarkForm';
const NUMBER_FIELDS = [
    ['inputTokens', 'Input tokens'],
    ['outputTokens', 'Output tokens (max_tokens)'],
    ['concurrency', 'Concurrency'],
    ['warmupRequests', 'Warm-up requests'],
    ['totalRequests', 'Measured requests'],
    ['slaThresholdMs', 'SLA (ms, for goodput)'],
];
function ScenarioCard(props) {
    const { index, value, errors, instances, onChange, onRemove } = props;
    const id = (field) => `scenario-${index}-${field}`;
    return (_jsxs(Card, { isCompact: true, children: [_jsx(CardHeader, { actions: {
                    actions: onRemove && (_jsx(Button, { variant: "link", isDanger: true, onClick: onRemove, children: "Remove" })),
                }, children: _jsxs(CardTitle, { children: ["Scenario ", index + 1] }) }), _jsx(CardBody, { children: _jsxs(Grid, { hasGutter: true, md: 6, xl: 4, children: [_jsx(GridItem, { children: _jsx(FormGroup, { label: "Instance", fieldId: id('instance'), isRequired: true, children: _jsx(FormSelect, { id: id('instance'), value: value.instanceId, onChange: (_e, v) => onChange({ ...value, instanceId: v }), children: instances.map((i) => (_jsx(FormSelectOption, { value: i.id, label: `${i.servedModelName} (${i.id})` }, i.id))) }) }) }), _jsx(GridItem, { children: _jsx(FormGroup, { label: "Route", fieldId: id('routing'), children: _jsxs(FormSelect, { id: id('routing'), value: value.routingMode, onChange: (_e, v) => onChange({ ...value, routingMode: v }), children: [_jsx(FormSelectOption, { value: "direct", label: "Direct to the engine" }), _jsx(FormSelectOption, { value: "proxy", label: "Through the proxy (/v1)" })] }) }) }), NUMBER_FIELDS.map(([field, label]) => (_jsx(GridItem, { children: _jsxs(FormGroup, { label: label, fieldId: id(field), children: [_jsx(TextInput, { id: id(field), type: "number", value: value[field], onChange: (_e, v) => onChange({ ...value, [field]: v }), validated: errors[field] ? 'error' : 'default' }), errors[field] && (_jsx(FormHelperText, { children: _jsx(HelperText, { children: _jsx(HelperTextItem, { variant: "error", children: errors[field] }) }) }))] }) }, field)))] }) })] }));
}
function NewRunForm({ instances }) {
    const first = instances[0]?.id ?? '';
    const [form, setForm] = useState({ name: '', mode: 'isolated', scenarios: [defaultScenario(first)] });
    const [submitted, setSubmitted] = useState(false);
    const create = useCreateBenchmark();
    const navigate = useNavigate();
    const { body, errors } = validateRun(form);
    const setScenario = (i, v) => setForm((f) => ({ ...f, scenarios: f.scenarios.map((s, j) => (j === i ? v : s)) }));
    return (_jsxs(Form, { onSubmit: (e) => {
            e.preventDefault();
            setSubmitted(true);
            if (body)
                create.mutate(body, { onSuccess: (run) => void navigate(`/benchmarks/${run.id}`) });
        }, children: [_jsxs(Grid, { hasGutter: true, md: 6, children: [_jsx(GridItem, { children: _jsx(FormGroup, { label: "Name", fieldId: "bench-name", children: _jsx(TextInput, { id: "bench-name", value: form.name, onChange: (_e, v) => setForm({ ...form, name: v }), placeholder: "optional" }) }) }), _jsx(GridItem, { children: _jsx(FormGroup, { label: "Mode", fieldId: "bench-mode", children: _jsxs(FormSelect, { id: "bench-mode", value: form.mode, onChange: (_e, v) => setForm({ ...form, mode: v }), children: [_jsx(FormSelectOption, { value: "isolated", label: "Isolated: scenarios one after another" }), _jsx(FormSelectOption, { value: "contention", label: "Contention: all scenarios at once" })] }) }) })] }), form.scenarios.map((s, i) => (_jsx(ScenarioCard, { index: i, value: s, errors: submitted ? (errors[i] ?? {}) : {}, instances: instances, onChange: (v) => setScenario(i, v), onRemove: form.scenarios.length > 1 ? () => setForm({ ...form, scenarios: form.scenarios.filter((_, j) => j !== i) }) : null }, i))), _jsx("div", { children: _jsx(Button, { variant: "secondary", onClick: () => setForm({ ...form, scenarios: [...form.scenarios, defaultScenario(first)] }), children: "Add scenario" }) }), create.error && _jsx(Alert, { isInline: true, variant: "danger", title: `The server refused the run: ${create.error.message}` }), _jsxs(ActionGroup, { children: [_jsx(Button, { type: "submit", variant: "primary", isLoading: create.isPending, isDisabled: create.isPending, children: "Start benchmark" }), _jsx(ButtonLink, { to: "/benchmarks", variant: "link", children: "Cancel" })] })] }));
}
export default function BenchmarkNewPage() {
    const instances = useInstances();
    const canMutate = useCanMutate();
    const active = (instances.data ?? []).filter((i) => i.status === 'active');
    let body;
    if (!canMutate)
        body = _jsx(Empty, { title: "Read-only", children: "Only an admin can start a benchmark." });
    else if (instances.isPending)
        body = _jsx(Loading, { what: "instances" });
    else if (active.length === 0)
        body = _jsx(Empty, { title: "No active model to measure", children: "Load a model and wait until it is active." });
    else
        body = _jsx(NewRunForm, { instances: active });
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "New benchmark", description: "Each scenario sends synthetic prompts of a set size to one instance." }), _jsx(PageSection, { children: _jsx(Card, { children: _jsx(CardBody, { children: body }) }) })] }));
}
