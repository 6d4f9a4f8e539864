import {
  Alert,
  AlertActionLink,
  Button,
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
  TextInput,
} from '@patternfly/react-core';
import { useEffect, useState } from 'react';
import { ApiError } from '../api/client';
import { useClustered, useEngines, useFitCheck, useGpus, useHealth, useLoadModel, useScheduleVerdict } from '../api/queries';
import type { LoadRequest } from '../api/types';
import { asGpuInfo, remotePod } from '../lib/cluster';
import { engineChoice } from '../lib/engineChoice';
import { formatBytes, formatGB } from '../lib/format';
import { EMPTY_LOAD_FORM, fitRequestFor, preAmpereWarnings, validateLoadForm, type LoadFormValues } from '../lib/loadForm';
import { useDebounced } from '../hooks/useDebounced';
import { FitPanel } from './FitPanel';
import { useNotify } from './Notifications';
import { PodSelector } from './PodSelector';
import { SchedulerVerdict } from './SchedulerVerdict';
import { FieldHelper as Helper } from './FieldHelper';

/** Load a model: the form, a live fit check with its warnings, then Load. */
export function LoadModelModal({ onClose }: { onClose: () => void }) {
  const [form, setForm] = useState<LoadFormValues>(EMPTY_LOAD_FORM);
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

  const set = <K extends keyof LoadFormValues>(key: K, value: LoadFormValues[K]): void => {
    setForm((f) => ({ ...f, [key]: value }));
    load.reset();
  };
  const toggleGpu = (index: number, on: boolean): void =>
    set('gpuIds', on ? [...form.gpuIds, index] : form.gpuIds.filter((g) => g !== index));

  const gpuList = elsewhere ? elsewhere.gpus.map(asGpuInfo) : (gpus.data?.gpus ?? []);
  const warnGpus = form.gpuIds.length > 0 ? form.gpuIds : (fit.data?.chosenGpuIds ?? []);
  const warnings = request ? preAmpereWarnings(warnGpus, gpuList, request.extraArgs) : [];
  const demo = health.data?.mode === 'demo';
  const engines = useEngines();
  const choice = engineChoice(engines.data, demo);
  // A default that cannot run here (no vLLM on a simulated-GPU pod) is not preselected.
  // Until the engines are known that cannot be told, so Load waits for them: a quick
  // Load went to the default (vLLM) and came back refused.
  useEffect(() => {
    if (choice.initial !== 'default') setForm((f) => (f.engine === 'default' ? { ...f, engine: choice.initial } : f));
  }, [choice.initial]);
  // With a memory limit typed (in GB, the API's unit), free memory reads in GB beside it.
  const limitUnit = form.gpuMemoryLimit.trim() ? 'GB' : 'GiB';
  const freeMemory = limitUnit === 'GB' ? formatGB : formatBytes;
  const shown = (key: keyof LoadFormValues): string | undefined => (touched || key !== 'modelPath' ? errors[key] : undefined);

  const submit = (req: LoadRequest): void => {
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

  return (
    <Modal isOpen variant="medium" onClose={onClose} aria-labelledby="load-title">
      <ModalHeader title="Load a model" labelId="load-title" />
      <ModalBody>
        <Form
          id="load-form"
          onSubmit={(e) => {
            e.preventDefault();
            setTouched(true);
            if (request && !engines.isPending) submit(request);
          }}
        >
          {cluster && (
            <PodSelector
              status={cluster}
              value={podId}
              onChange={(v) => {
                setPodId(v);
                set('gpuIds', []); // GPU indexes are per pod
              }}
            />
          )}
          <FormGroup label="Model path" isRequired fieldId="load-model-path">
            <TextInput
              id="load-model-path"
              isRequired
              value={form.modelPath}
              onChange={(_e, v) => set('modelPath', v)}
              placeholder="/models/Qwen2.5-1.5B-Instruct or Qwen/Qwen2.5-1.5B-Instruct"
              validated={shown('modelPath') ? 'error' : 'default'}
            />
            <Helper error={shown('modelPath')} />
          </FormGroup>
          <Grid hasGutter md={4}>
            <GridItem>
              <FormGroup label="Served model name" fieldId="load-served-name">
                <TextInput
                  id="load-served-name"
                  value={form.servedModelName}
                  onChange={(_e, v) => set('servedModelName', v)}
                  placeholder="the model path"
                />
              </FormGroup>
            </GridItem>
            <GridItem>
              <FormGroup label="Display name" fieldId="load-display-name">
                <TextInput id="load-display-name" value={form.displayName} onChange={(_e, v) => set('displayName', v)} />
              </FormGroup>
            </GridItem>
            <GridItem>
              <FormGroup label="Engine" fieldId="load-engine">
                <FormSelect id="load-engine" value={form.engine} onChange={(_e, v) => set('engine', v as LoadFormValues['engine'])}>
                  <FormSelectOption value="default" label={choice.defaultLabel} />
                  <FormSelectOption value="vllm" label={choice.vllmUnavailable ? 'vLLM (cannot run here)' : 'vLLM'} />
                  <FormSelectOption value="sim" label="Simulated (no GPU work)" />
                </FormSelect>
                {choice.vllmUnavailable && (
                  <Helper error={undefined}>
                    <span data-testid="vllm-unavailable">{choice.vllmUnavailable}</span>
                  </Helper>
                )}
              </FormGroup>
            </GridItem>
            <GridItem>
              <FormGroup label="Tensor parallel size" fieldId="load-tp">
                <TextInput
                  id="load-tp"
                  type="number"
                  min={1}
                  max={64}
                  value={form.tensorParallelSize}
                  onChange={(_e, v) => set('tensorParallelSize', v)}
                  validated={errors.tensorParallelSize ? 'error' : 'default'}
                />
                <Helper error={errors.tensorParallelSize} />
              </FormGroup>
            </GridItem>
            <GridItem>
              <FormGroup label="GPU memory limit (GB per GPU)" fieldId="load-limit">
                <TextInput
                  id="load-limit"
                  type="number"
                  min={0}
                  step="any"
                  value={form.gpuMemoryLimit}
                  onChange={(_e, v) => set('gpuMemoryLimit', v)}
                  placeholder="automatic"
                  validated={errors.gpuMemoryLimit ? 'error' : 'default'}
                />
                <Helper error={errors.gpuMemoryLimit} />
              </FormGroup>
            </GridItem>
            <GridItem>
              <FormGroup label="Sleep mode" fieldId="load-sleep" role="group">
                <Checkbox
                  id="load-sleep"
                  label="Enable sleep mode"
                  description="Sleep and wake without reloading."
                  isChecked={form.enableSleepMode}
                  onChange={(_e, v) => set('enableSleepMode', v)}
                />
              </FormGroup>
            </GridItem>
          </Grid>
          <FormGroup label="GPUs" fieldId="load-gpus" role="group" isInline>
            {gpuList.length === 0 && <span>No GPUs on {elsewhere ? `pod ${elsewhere.id}` : 'this node'}: the engine runs on the CPU.</span>}
            {gpuList.map((g) => (
              <Checkbox
                key={g.index}
                id={`load-gpu-${g.index}`}
                label={`GPU ${g.index} · ${g.name}${g.simulated ? ' (simulated)' : ''} · ${freeMemory(g.freeBytes)} free`}
                isChecked={form.gpuIds.includes(g.index)}
                onChange={(_e, on) => toggleGpu(g.index, on)}
              />
            ))}
            <Helper error={errors.gpuIds}>
              {gpuList.length > 0 ? 'None checked: automatic (the GPU with the most free memory).' : undefined}
            </Helper>
          </FormGroup>
          <FormGroup label="Extra engine arguments" fieldId="load-args">
            <TextInput
              id="load-args"
              value={form.extraArgs}
              onChange={(_e, v) => set('extraArgs', v)}
              placeholder="--max-model-len 8192"
              className="sz-mono"
              validated={errors.extraArgs ? 'error' : 'default'}
            />
            <Helper error={errors.extraArgs}>
              Split into argv tokens like a shell (quotes allowed), never run by one. Simulated engine: --memory-gib 4
              --load-seconds 2.
            </Helper>
          </FormGroup>
        </Form>
        <div className="sz-mt-md" aria-live="polite">
          {scheduling && <SchedulerVerdict verdict={verdict} />}
          {gpuList.length > 0 && !elsewhere && <FitPanel fit={fit} idleText="Enter a model path to check whether it fits." unit={limitUnit} />}
          {warnings.map((w) => (
            <Alert key={w} isInline isPlain variant="warning" title="Pre-Ampere GPU" data-testid="load-warning">
              {w}
            </Alert>
          ))}
          {load.error && (
            <Alert
              isInline
              variant="danger"
              title={doesNotFit ? 'The server refused: the model will not fit' : 'The load was refused'}
              actionLinks={
                doesNotFit &&
                request && <AlertActionLink onClick={() => submit({ ...request, force: true })}>Load anyway (skip the estimate)</AlertActionLink>
              }
            >
              {load.error.message}
            </Alert>
          )}
        </div>
      </ModalBody>
      <ModalFooter>
        <Button
          type="submit"
          form="load-form"
          variant="primary"
          isLoading={load.isPending}
          isDisabled={load.isPending || engines.isPending}
        >
          Load
        </Button>
        <Button variant="link" onClick={onClose}>
          Cancel
        </Button>
      </ModalFooter>
    </Modal>
  );
}
