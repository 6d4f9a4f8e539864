import {
  ActionGroup,
  Alert,
  Button,
  Card,
  CardBody,
  CardHeader,
  CardTitle,
  Form,
  FormGroup,
  FormHelperText,
  FormSelect,
  FormSelectOption,
  Grid,
  GridItem,
  HelperText,
  HelperTextItem,
  PageSection,
  TextInput,
} from '@patternfly/react-core';
import { useState } from 'react';
import { useNavigate } from 'react-router';
import { useCreateBenchmark, useInstances } from '../api/queries';
import type { ModelInstance, RoutingMode, RunMode } from '../api/types';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { PageHeader } from '../components/PageHeader';
import { Empty, Loading } from '../components/States';
import { defaultScenario, validateRun, type RunForm, type ScenarioErrors, type ScenarioForm } from '../lib/benchmarkForm';

const NUMBER_FIELDS: Array<[keyof ScenarioForm, string]> = [
  ['inputTokens', 'Input tokens'],
  ['outputTokens', 'Output tokens (max_tokens)'],
  ['concurrency', 'Concurrency'],
  ['warmupRequests', 'Warm-up requests'],
  ['totalRequests', 'Measured requests'],
  ['slaThresholdMs', 'SLA (ms, for goodput)'],
];

function ScenarioCard(props: {
  index: number;
  value: ScenarioForm;
  errors: ScenarioErrors;
  instances: ModelInstance[];
  onChange: (v: ScenarioForm) => void;
  onRemove: (() => void) | null;
}) {
  const { index, value, errors, instances, onChange, onRemove } = props;
  const id = (field: string): string => `scenario-${index}-${field}`;
  return (
    <Card isCompact>
      <CardHeader
        actions={{
          actions: onRemove && (
            <Button variant="link" isDanger onClick={onRemove}>
              Remove
            </Button>
          ),
        }}
      >
        <CardTitle>Scenario {index + 1}</CardTitle>
      </CardHeader>
      <CardBody>
        <Grid hasGutter md={6} xl={4}>
          <GridItem>
            <FormGroup label="Instance" fieldId={id('instance')} isRequired>
              <FormSelect id={id('instance')} value={value.instanceId} onChange={(_e, v) => onChange({ ...value, instanceId: v })}>
                {instances.map((i) => (
                  <FormSelectOption key={i.id} value={i.id} label={`${i.servedModelName} (${i.id})`} />
                ))}
              </FormSelect>
            </FormGroup>
          </GridItem>
          <GridItem>
            <FormGroup label="Route" fieldId={id('routing')}>
              <FormSelect
                id={id('routing')}
                value={value.routingMode}
                onChange={(_e, v) => onChange({ ...value, routingMode: v as RoutingMode })}
              >
                <FormSelectOption value="direct" label="Direct to the engine" />
                <FormSelectOption value="proxy" label="Through the proxy (/v1)" />
              </FormSelect>
            </FormGroup>
          </GridItem>
          {NUMBER_FIELDS.map(([field, label]) => (
            <GridItem key={field}>
              <FormGroup label={label} fieldId={id(field)}>
                <TextInput
                  id={id(field)}
                  type="number"
                  value={value[field]}
                  onChange={(_e, v) => onChange({ ...value, [field]: v })}
                  validated={errors[field] ? 'error' : 'default'}
                />
                {errors[field] && (
                  <FormHelperText>
                    <HelperText>
                      <HelperTextItem variant="error">{errors[field]}</HelperTextItem>
                    </HelperText>
                  </FormHelperText>
                )}
              </FormGroup>
            </GridItem>
          ))}
        </Grid>
      </CardBody>
    </Card>
  );
}

function NewRunForm({ instances }: { instances: ModelInstance[] }) {
  const first = instances[0]?.id ?? '';
  const [form, setForm] = useState<RunForm>({ name: '', mode: 'isolated', scenarios: [defaultScenario(first)] });
  const [submitted, setSubmitted] = useState(false);
  const create = useCreateBenchmark();
  const navigate = useNavigate();
  const { body, errors } = validateRun(form);
  const setScenario = (i: number, v: ScenarioForm): void =>
    setForm((f) => ({ ...f, scenarios: f.scenarios.map((s, j) => (j === i ? v : s)) }));

  return (
    <Form
      onSubmit={(e) => {
        e.preventDefault();
        setSubmitted(true);
        if (body) create.mutate(body, { onSuccess: (run) => void navigate(`/benchmarks/${run.id}`) });
      }}
    >
      <Grid hasGutter md={6}>
        <GridItem>
          <FormGroup label="Name" fieldId="bench-name">
            <TextInput id="bench-name" value={form.name} onChange={(_e, v) => setForm({ ...form, name: v })} placeholder="optional" />
          </FormGroup>
        </GridItem>
        <GridItem>
          <FormGroup label="Mode" fieldId="bench-mode">
            <FormSelect id="bench-mode" value={form.mode} onChange={(_e, v) => setForm({ ...form, mode: v as RunMode })}>
              <FormSelectOption value="isolated" label="Isolated: scenarios one after another" />
              <FormSelectOption value="contention" label="Contention: all scenarios at once" />
            </FormSelect>
          </FormGroup>
        </GridItem>
      </Grid>
      {form.scenarios.map((s, i) => (
        <ScenarioCard
          key={i}
          index={i}
          value={s}
          errors={submitted ? (errors[i] ?? {}) : {}}
          instances={instances}
          onChange={(v) => setScenario(i, v)}
          onRemove={form.scenarios.length > 1 ? () => setForm({ ...form, scenarios: form.scenarios.filter((_, j) => j !== i) }) : null}
        />
      ))}
      <div>
        <Button variant="secondary" onClick={() => setForm({ ...form, scenarios: [...form.scenarios, defaultScenario(first)] })}>
          Add scenario
        </Button>
      </div>
      {create.error && <Alert isInline variant="danger" title={`The server refused the run: ${create.error.message}`} />}
      <ActionGroup>
        <Button type="submit" variant="primary" isLoading={create.isPending} isDisabled={create.isPending}>
          Start benchmark
        </Button>
        <ButtonLink to="/benchmarks" variant="link">
          Cancel
        </ButtonLink>
      </ActionGroup>
    </Form>
  );
}

export default function BenchmarkNewPage() {
  const instances = useInstances();
  const canMutate = useCanMutate();
  const active = (instances.data ?? []).filter((i) => i.status === 'active');
  let body;
  if (!canMutate) body = <Empty title="Read-only">Only an admin can start a benchmark.</Empty>;
  else if (instances.isPending) body = <Loading what="instances" />;
  else if (active.length === 0) body = <Empty title="No active model to measure">Load a model and wait until it is active.</Empty>;
  else body = <NewRunForm instances={active} />;
  return (
    <>
      <PageHeader title="New benchmark" description="Each scenario sends synthetic prompts of a set size to one instance." />
      <PageSection>
        <Card>
          <CardBody>{body}</CardBody>
        </Card>
      </PageSection>
    </>
  );
}
