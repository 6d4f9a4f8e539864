import {
  Alert,
  Button,
  Card,
  CardBody,
  Checkbox,
  Flex,
  FlexItem,
  Form,
  FormGroup,
  FormHelperText,
  FormSelect,
  FormSelectOption,
  Grid,
  GridItem,
  HelperText,
  HelperTextItem,
  Label,
  type LabelProps,
  Modal,
  ModalBody,
  ModalFooter,
  ModalHeader,
  PageSection,
  TextInput,
} from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState, type ReactNode } from 'react';
import { Link } from 'react-router';
import { useCatalog, useDeleteCatalogEntry, usePutCatalogEntry, type CatalogModel, type CatalogState } from '../api/catalog';
import { useCanMutate } from '../auth/AuthContext';
import { AdaptersCard } from '../components/AdaptersCard';
import { ConfirmModal } from '../components/ConfirmModal';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { useNotify } from '../components/Notifications';
import { useNow } from '../hooks/useNow';
import {
  EMPTY_CATALOG_FORM,
  entryFromForm,
  entrySummary,
  formFromModel,
  idleCountdown,
  serverFieldErrors,
  type CatalogForm,
  type FieldErrors,
} from '../lib/catalogForm';
import { formatDuration } from '../lib/format';

const STATE_COLORS: Record<CatalogState, NonNullable<LabelProps['color']>> = {
  unloaded: 'grey',
  starting: 'blue',
  active: 'green',
  sleeping: 'purple',
  stopping: 'orange',
  failed: 'red',
  invalid: 'red',
  unreachable: 'orange',
};

function Ttl({ m, ageSeconds }: { m: CatalogModel; ageSeconds: number }) {
  // The server's idle clock is as old as the last fetch: count on from there.
  const idle = m.idleSeconds == null || m.state === 'starting' ? m.idleSeconds : m.idleSeconds + ageSeconds;
  const c = idleCountdown({ ...m, idleSeconds: idle ?? null });
  const e = m.entry;
  if (!e) return <>—</>;
  if (e.pinned) return <>never (pinned)</>;
  if (c) return <span data-countdown={c.action}>{c.seconds > 0 ? `${c.action} in ${formatDuration(c.seconds)}` : `${c.action} due`}</span>;
  const ttls = [
    e.idleSleepSeconds && (e.sleepLevel ?? 0) > 0 ? `sleep after ${formatDuration(e.idleSleepSeconds)}` : null,
    e.idleUnloadSeconds ? `unload after ${formatDuration(e.idleUnloadSeconds)}` : null,
  ].filter(Boolean);
  return <>{ttls.length ? ttls.join(', ') + ' idle' : 'none'}</>;
}

function Field({
  id,
  label,
  error,
  help,
  children,
  required = false,
}: {
  id: keyof CatalogForm;
  label: string;
  error: string | undefined;
  help?: string;
  children: ReactNode;
  required?: boolean;
}) {
  return (
    <FormGroup label={label} fieldId={`cat-${id}`} isRequired={required}>
      {children}
      {(error || help) && (
        <FormHelperText>
          <HelperText>
            <HelperTextItem variant={error ? 'error' : 'default'} id={`cat-${id}-help`}>
              {error ?? help}
            </HelperTextItem>
          </HelperText>
        </FormHelperText>
      )}
    </FormGroup>
  );
}

function EntryModal({ initial, isNew, onClose }: { initial: CatalogForm; isNew: boolean; onClose: () => void }) {
  const [form, setForm] = useState(initial);
  const [errors, setErrors] = useState<FieldErrors>({});
  const [general, setGeneral] = useState<string | null>(null);
  const put = usePutCatalogEntry();
  const notify = useNotify();
  const set = <K extends keyof CatalogForm>(key: K, value: CatalogForm[K]): void => setForm((f) => ({ ...f, [key]: value }));
  const text = (key: keyof CatalogForm, label: string, opts: { help?: string; required?: boolean; type?: 'number' } = {}) => (
    <Field id={key} label={label} error={errors[key]} help={opts.help} required={opts.required}>
      <TextInput
        id={`cat-${key}`}
        type={opts.type ?? 'text'}
        value={String(form[key])}
        onChange={(_e, v) => set(key, v as never)}
        validated={errors[key] ? 'error' : 'default'}
        aria-describedby={`cat-${key}-help`}
        isDisabled={key === 'name' && !isNew}
      />
    </Field>
  );
  const save = (): void => {
    const { entry, errors: local } = entryFromForm(form);
    setErrors(local);
    setGeneral(null);
    if (!entry) return;
    put.mutate(
      { name: form.name.trim(), entry },
      {
        onSuccess: () => {
          notify('success', `Catalog entry ${form.name.trim()} saved`);
          onClose();
        },
        onError: (e) => {
          const mapped = serverFieldErrors(e);
          setErrors(mapped.fields);
          setGeneral(mapped.general);
        },
      },
    );
  };
  return (
    <Modal isOpen variant="medium" onClose={onClose} aria-labelledby="cat-title">
      <ModalHeader
        title={isNew ? 'Add a catalog entry' : `Edit ${initial.name}`}
        labelId="cat-title"
        description="Checked like a load request. A running instance keeps running as it was loaded."
      />
      <ModalBody>
        <Form onSubmit={(e) => e.preventDefault()}>
          <Grid hasGutter md={6}>
            <GridItem>{text('name', 'Served model name', { required: true, help: 'What /v1 requests name' })}</GridItem>
            <GridItem>{text('modelPath', 'Model path', { required: !form.adapterOf.trim(), help: 'HF id or folder; empty for an adapter' })}</GridItem>
            <GridItem>
              <Field id="engine" label="Engine" error={errors.engine}>
                <FormSelect id="cat-engine" value={form.engine} onChange={(_e, v) => set('engine', v as CatalogForm['engine'])}>
                  <FormSelectOption value="" label="node default" />
                  <FormSelectOption value="vllm" label="vllm" />
                  <FormSelectOption value="sim" label="sim (simulated)" />
                  <FormSelectOption value="external" label="external (a server at a URL)" />
                </FormSelect>
              </Field>
            </GridItem>
            <GridItem>{text('url', 'URL (external only)')}</GridItem>
            <GridItem>{text('aliases', 'Aliases', { help: 'Comma-separated' })}</GridItem>
            <GridItem>{text('gpuIds', 'GPU ids', { help: 'Empty: automatic placement' })}</GridItem>
            <GridItem>{text('gpuMemoryLimit', 'GPU memory limit (GB)', { type: 'number' })}</GridItem>
            <GridItem>{text('tensorParallelSize', 'Tensor parallel size', { type: 'number' })}</GridItem>
            <GridItem>
              <Field id="sleepLevel" label="Sleep level" error={errors.sleepLevel}>
                <FormSelect id="cat-sleepLevel" value={form.sleepLevel} onChange={(_e, v) => set('sleepLevel', v as CatalogForm['sleepLevel'])}>
                  <FormSelectOption value="0" label="0: never sleep" />
                  <FormSelectOption value="1" label="1: weights to CPU RAM" />
                  <FormSelectOption value="2" label="2: discard weights" />
                </FormSelect>
              </Field>
            </GridItem>
            <GridItem>{text('idleSleepSeconds', 'Sleep after idle (s)', { type: 'number' })}</GridItem>
            <GridItem>{text('idleUnloadSeconds', 'Unload after idle (s)', { type: 'number' })}</GridItem>
            <GridItem>{text('extraArgs', 'Extra engine arguments')}</GridItem>
            <GridItem>
              <Checkbox id="cat-pinned" label="Pinned (never slept, unloaded or evicted)" isChecked={form.pinned} onChange={(_e, v) => set('pinned', v)} />
              <Checkbox id="cat-preload" label="Preload at server start" isChecked={form.preload} onChange={(_e, v) => set('preload', v)} />
            </GridItem>
            <GridItem>
              <Field id="warmup" label="Warmup" error={errors.warmup}>
                <Checkbox
                  id="cat-warmup"
                  label="Send a 1-token request after each wake, before held traffic"
                  isChecked={form.warmup}
                  onChange={(_e, v) => set('warmup', v)}
                />
              </Field>
            </GridItem>
            <GridItem>{text('warmupPrompt', 'Warmup prompt', { help: 'Empty: "Hello"' })}</GridItem>
            <GridItem>{text('loraSlots', 'LoRA slots', { type: 'number', help: 'A base for LoRA adapters: adapters an instance holds at once' })}</GridItem>
            <GridItem>{text('maxLoraRank', 'Max LoRA rank', { type: 'number', help: 'With LoRA slots: 1, 8, 16, 32, 64, 128, 256, 320 or 512 (default 16)' })}</GridItem>
            <GridItem>{text('adapterOf', 'Adapter of', { help: 'A LoRA adapter: the base entry it runs in (takes only its path and aliases)' })}</GridItem>
            <GridItem>{text('adapterPath', 'Adapter path', { required: Boolean(form.adapterOf.trim()), help: 'The folder with adapter_config.json' })}</GridItem>
          </Grid>
        </Form>
        {general && <Alert isInline variant="danger" title={general} className="sz-mt-md" />}
      </ModalBody>
      <ModalFooter>
        <Button variant="primary" onClick={save} isLoading={put.isPending} isDisabled={put.isPending}>
          Save
        </Button>
        <Button variant="link" onClick={onClose}>
          Cancel
        </Button>
      </ModalFooter>
    </Modal>
  );
}

export default function CatalogPage() {
  const catalog = useCatalog();
  const canMutate = useCanMutate();
  const del = useDeleteCatalogEntry();
  const notify = useNotify();
  const now = useNow();
  const [editing, setEditing] = useState<{ form: CatalogForm; isNew: boolean } | null>(null);
  const [deleting, setDeleting] = useState<string | null>(null);
  const age = catalog.dataUpdatedAt ? Math.max(0, (now - catalog.dataUpdatedAt) / 1000) : 0;

  return (
    <>
      <PageHeader
        title="Catalog"
        description="Models this node serves on demand: started by the first request, put to sleep or unloaded when idle."
        actions={
          canMutate && (
            <Button variant="primary" onClick={() => setEditing({ form: EMPTY_CATALOG_FORM, isNew: true })}>
              Add entry
            </Button>
          )
        }
      />
      <PageSection>
        <Card>
          <CardBody>
            {catalog.isPending && <Loading what="the catalog" />}
            {catalog.isError && <ErrorState what="the catalog" error={catalog.error} onRetry={() => void catalog.refetch()} />}
            {catalog.data?.length === 0 && <Empty title="The catalog is empty">Add an entry, or list models in the config file.</Empty>}
            {catalog.data && catalog.data.length > 0 && (
              <Table aria-label="Catalog entries" variant="compact" gridBreakPoint="grid-md">
                <Thead>
                  <Tr>
                    <Th>Name</Th>
                    <Th modifier="fitContent">State</Th>
                    <Th>Model</Th>
                    <Th modifier="fitContent">Idle TTL</Th>
                    <Th modifier="fitContent">Pinned</Th>
                    <Th modifier="fitContent">Source</Th>
                    {canMutate && <Th screenReaderText="Actions" />}
                  </Tr>
                </Thead>
                <Tbody>
                  {catalog.data.map((m) => (
                    <Tr key={m.name} data-catalog-name={m.name} data-state={m.state}>
                      <Td dataLabel="Name">
                        <strong>{m.name}</strong>
                        {m.entry?.aliases?.length ? <div className="sz-wrap-anywhere">aka {m.entry.aliases.join(', ')}</div> : null}
                      </Td>
                      <Td dataLabel="State">
                        <Label isCompact color={STATE_COLORS[m.state]}>
                          {m.state}
                        </Label>
                        {m.error && <div className="sz-failure-reason">{m.error}</div>}
                        {m.instanceIds.map((id) => (
                          <div key={id}>
                            <Link to={`/models/${id}`} className="sz-mono sz-wrap-anywhere">
                              {id}
                            </Link>
                          </div>
                        ))}
                      </Td>
                      <Td dataLabel="Model" className="sz-wrap-anywhere">
                        {m.entry ? entrySummary(m.entry) : '—'}
                      </Td>
                      <Td dataLabel="Idle TTL" modifier="nowrap">
                        <Ttl m={m} ageSeconds={age} />
                      </Td>
                      <Td dataLabel="Pinned">{m.entry?.pinned ? 'pinned' : '—'}</Td>
                      <Td dataLabel="Source">{m.source === 'config' ? 'config file' : m.overridesConfig ? 'API (overrides config)' : 'API'}</Td>
                      {canMutate && (
                        <Td dataLabel="Actions">
                          <Flex spaceItems={{ default: 'spaceItemsSm' }} flexWrap={{ default: 'nowrap' }}>
                            <FlexItem>
                              <Button variant="secondary" size="sm" onClick={() => setEditing({ form: formFromModel(m), isNew: false })}>
                                Edit
                              </Button>
                            </FlexItem>
                            {m.source === 'api' && (
                              <FlexItem>
                                <Button variant="link" isDanger size="sm" onClick={() => setDeleting(m.name)}>
                                  Delete
                                </Button>
                              </FlexItem>
                            )}
                          </Flex>
                        </Td>
                      )}
                    </Tr>
                  ))}
                </Tbody>
              </Table>
            )}
          </CardBody>
        </Card>
      </PageSection>
      <PageSection>
        <AdaptersCard catalog={catalog.data} />
      </PageSection>
      {editing && <EntryModal initial={editing.form} isNew={editing.isNew} onClose={() => setEditing(null)} />}
      {deleting && (
        <ConfirmModal
          title={`Delete catalog entry ${deleting}?`}
          confirmLabel="Delete"
          danger
          busy={del.isPending}
          error={del.error}
          onCancel={() => setDeleting(null)}
          onConfirm={() =>
            del.mutate(deleting, {
              onSuccess: () => {
                notify('success', `Catalog entry ${deleting} deleted`);
                setDeleting(null);
              },
            })
          }
        >
          <p>Running instances keep running; a config-file entry of this name applies again.</p>
        </ConfirmModal>
      )}
    </>
  );
}
