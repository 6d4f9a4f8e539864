import {
  Alert,
  Button,
  Card,
  CardBody,
  CardHeader,
  CardTitle,
  Checkbox,
  Form,
  FormGroup,
  FormSelect,
  FormSelectOption,
  Grid,
  GridItem,
  Modal,
  ModalBody,
  ModalFooter,
  ModalHeader,
  TextArea,
  TextInput,
} from '@patternfly/react-core';
import { useState } from 'react';
import { usePutPreset } from '../api/queries';
import type { Preset } from '../api/types';
import { EMPTY_PRESET_MODEL, parseModelsJson, PRESET_NAME, toBody, toForm, type PresetModelForm } from '../lib/presetForm';
import { errorAt, fieldErrors } from '../lib/presets';
import { FieldHelper as Helper } from './FieldHelper';

type Errors = (field: string) => string | undefined;

function ModelFields({
  index,
  row,
  onChange,
  onRemove,
  errorOf,
}: {
  index: number;
  row: PresetModelForm;
  onChange: (row: PresetModelForm) => void;
  onRemove: () => void;
  errorOf: Errors;
}) {
  const id = (f: string): string => `preset-m${index}-${f}`;
  const at = (f: keyof PresetModelForm): string | undefined => errorOf(`models.${index}.${f}`);
  const set = <K extends keyof PresetModelForm>(key: K, value: PresetModelForm[K]): void => onChange({ ...row, [key]: value });
  const text = (f: 'modelPath' | 'servedModelName' | 'replicas' | 'gpuType' | 'minVramGiB' | 'tensorParallelSize', label: string, extra: { type?: 'number'; placeholder?: string; helper?: string } = {}) => (
    <FormGroup label={label} fieldId={id(f)}>
      <TextInput
        id={id(f)}
        type={extra.type}
        value={row[f]}
        placeholder={extra.placeholder}
        onChange={(_e, v) => set(f, v)}
        validated={at(f) ? 'error' : 'default'}
      />
      <Helper error={at(f)}>{extra.helper}</Helper>
    </FormGroup>
  );
  return (
    <Card isCompact className="sz-mt-md" data-testid={`preset-model-${index}`}>
      <CardHeader
        actions={{
          actions: (
            <Button variant="link" isDanger size="sm" onClick={onRemove}>
              Remove
            </Button>
          ),
        }}
      >
        <CardTitle>Model {index + 1}</CardTitle>
      </CardHeader>
      <CardBody>
        <Grid hasGutter md={6} xl={4}>
          <GridItem md={12} xl={8}>
            {text('modelPath', 'Model path', { placeholder: 'Qwen/Qwen3-8B or /models/qwen3-8b' })}
          </GridItem>
          <GridItem>{text('servedModelName', 'Served model name', { helper: 'The identity: instances of this name are the preset’s.' })}</GridItem>
          <GridItem>{text('replicas', 'Replicas', { type: 'number' })}</GridItem>
          <GridItem>
            <FormGroup label="Engine" fieldId={id('engine')}>
              <FormSelect id={id('engine')} value={row.engine} onChange={(_e, v) => set('engine', v as PresetModelForm['engine'])}>
                <FormSelectOption value="default" label="Server default" />
                <FormSelectOption value="vllm" label="vLLM" />
                <FormSelectOption value="sim" label="Simulated" />
              </FormSelect>
              <Helper error={at('engine')} />
            </FormGroup>
          </GridItem>
          <GridItem>{text('tensorParallelSize', 'Tensor parallel size', { type: 'number' })}</GridItem>
          <GridItem>{text('gpuType', 'GPU type', { placeholder: 'any (e.g. L4, *A100*80GB)' })}</GridItem>
          <GridItem>{text('minVramGiB', 'Minimum VRAM (GiB per GPU)', { type: 'number', placeholder: 'any' })}</GridItem>
          <GridItem>
            <FormGroup label="Sleep level" fieldId={id('sleepLevel')}>
              <FormSelect id={id('sleepLevel')} value={row.sleepLevel} onChange={(_e, v) => set('sleepLevel', v as PresetModelForm['sleepLevel'])}>
                <FormSelectOption value="0" label="0: no sleep mode" />
                <FormSelectOption value="1" label="1: sleep keeps weights in host RAM" />
                <FormSelectOption value="2" label="2: sleep discards weights (wake reloads them)" />
              </FormSelect>
              <Helper error={at('sleepLevel')} />
            </FormGroup>
          </GridItem>
          <GridItem md={12} xl={8}>
            <FormGroup label="Extra engine arguments" fieldId={id('extraArgs')}>
              <TextInput
                id={id('extraArgs')}
                className="sz-mono"
                value={row.extraArgs}
                placeholder="--max-model-len 8192"
                onChange={(_e, v) => set('extraArgs', v)}
                validated={at('extraArgs') ? 'error' : 'default'}
              />
              <Helper error={at('extraArgs')} />
            </FormGroup>
          </GridItem>
          <GridItem>
            <FormGroup label="Pinned" fieldId={id('pinned')} role="group">
              <Checkbox id={id('pinned')} label="Pinned" isChecked={row.pinned} onChange={(_e, v) => set('pinned', v)} />
            </FormGroup>
          </GridItem>
        </Grid>
      </CardBody>
    </Card>
  );
}

/** Create or edit a preset. What the browser cannot judge is left to the server: its
 *  422 names the field (`models.1.replicas`), and the message is shown there. */
export function PresetEditor({ preset, onClose, onSaved }: { preset: Preset | null; onClose: () => void; onSaved: (name: string) => void }) {
  const [name, setName] = useState(preset?.name ?? '');
  const [rows, setRows] = useState<PresetModelForm[]>(preset ? preset.models.map(toForm) : [{ ...EMPTY_PRESET_MODEL }]);
  const [local, setLocal] = useState<Record<string, string>>({});
  const put = usePutPreset();
  const server = fieldErrors(put.error);
  const errorOf: Errors = (field) => local[field] ?? errorAt(server, field);
  const nameError = local.name;
  const bodyError = errorAt(server, 'body') ?? errorAt(server, 'models');

  // The JSON editor: the same body as text (null: the form is shown).
  const [json, setJson] = useState<string | null>(null);
  const [jsonError, setJsonError] = useState<string | null>(null);

  const save = (): void => {
    const { body, errors } = json === null ? toBody(rows) : { body: null, errors: {} as Record<string, string> };
    if (!PRESET_NAME.test(name)) errors.name = 'Letters, digits, ".", "_" and "-", starting with a letter or digit (at most 128).';
    setLocal(errors);
    put.reset();
    let models = body?.models ?? null;
    if (json !== null) {
      const parsed = parseModelsJson(json);
      setJsonError(parsed.error);
      models = parsed.models;
    }
    if (!models || errors.name) return;
    put.mutate({ name, models }, { onSuccess: (p) => onSaved(p.name) });
  };
  const toJson = (): void => {
    const { body, errors } = toBody(rows);
    setLocal(errors);
    if (body) setJson(JSON.stringify(body, null, 2));
  };
  const toFormView = (): void => {
    const parsed = parseModelsJson(json ?? '');
    setJsonError(parsed.error);
    if (!parsed.models) return;
    setRows(parsed.models.map(toForm));
    setJson(null);
    put.reset();
  };
  const update = (i: number, row: PresetModelForm): void => {
    setRows((rs) => rs.map((r, j) => (j === i ? row : r)));
  };

  return (
    <Modal isOpen variant="large" onClose={onClose} aria-labelledby="preset-edit-title">
      <ModalHeader title={preset ? `Edit preset ${preset.name}` : 'New preset'} labelId="preset-edit-title" />
      <ModalBody>
        <Form
          id="preset-form"
          onSubmit={(e) => {
            e.preventDefault();
            save();
          }}
        >
          <FormGroup label="Name" isRequired fieldId="preset-name">
            <TextInput
              id="preset-name"
              isRequired
              value={name}
              isDisabled={preset !== null}
              onChange={(_e, v) => setName(v)}
              validated={nameError ? 'error' : 'default'}
            />
            <Helper error={nameError}>{preset?.applied ? 'Applied: saving changes the desired state at once.' : undefined}</Helper>
          </FormGroup>
        </Form>
        {json === null ? (
          <>
            {rows.map((row, i) => (
              <ModelFields
                key={i}
                index={i}
                row={row}
                errorOf={errorOf}
                onChange={(r) => update(i, r)}
                onRemove={() => setRows((rs) => rs.filter((_, j) => j !== i))}
              />
            ))}
            <Button variant="secondary" className="sz-mt-md" onClick={() => setRows((rs) => [...rs, { ...EMPTY_PRESET_MODEL }])}>
              Add model
            </Button>{' '}
            <Button variant="link" className="sz-mt-md" onClick={toJson}>
              Edit as JSON
            </Button>
          </>
        ) : (
          <FormGroup label="Preset (JSON)" fieldId="preset-json" className="sz-mt-md">
            <TextArea
              id="preset-json"
              className="sz-mono"
              rows={16}
              resizeOrientation="vertical"
              value={json}
              onChange={(_e, v) => setJson(v)}
              validated={jsonError || put.error ? 'error' : 'default'}
            />
            <Helper error={jsonError ?? undefined}>The body of PUT /api/cluster/presets/{'{name}'}: camelCase fields, as in docs/cluster.md.</Helper>
            {Object.keys(server).length > 0 && (
              <ul className="sz-error-text" data-testid="preset-json-errors">
                {Object.entries(server).map(([field, messages]) => (
                  <li key={field}>
                    <code>{field}</code>: {messages.join('; ')}
                  </li>
                ))}
              </ul>
            )}
            <Button variant="link" onClick={toFormView}>
              Edit as form
            </Button>
          </FormGroup>
        )}
        {put.error && (
          <Alert isInline variant="danger" title="The server refused the preset" className="sz-mt-md" data-testid="preset-save-error">
            {bodyError ?? put.error.message}
          </Alert>
        )}
      </ModalBody>
      <ModalFooter>
        <Button type="submit" form="preset-form" variant="primary" isLoading={put.isPending} isDisabled={put.isPending}>
          Save
        </Button>
        <Button variant="link" onClick={onClose}>
          Cancel
        </Button>
      </ModalFooter>
    </Modal>
  );
}
