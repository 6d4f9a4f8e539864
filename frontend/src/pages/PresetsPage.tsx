import {
  Button,
  Card,
  CardBody,
  CardHeader,
  CardTitle,
  Content,
  DescriptionList,
  DescriptionListDescription,
  DescriptionListGroup,
  DescriptionListTerm,
  Flex,
  FlexItem,
  Label,
  PageSection,
} from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { useSearchParams } from 'react-router';
import { useDeletePreset, usePresetPlan, usePresets } from '../api/queries';
import type { Preset, ReconcileStatus } from '../api/types';
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

const RUN_COLOR: Record<string, 'green' | 'red' | 'blue' | 'orange'> = { done: 'green', failed: 'red', running: 'blue', cancelled: 'orange' };

function ReconcileSummary({ status }: { status: ReconcileStatus | undefined }) {
  const run = status?.lastRun;
  const stuck = status?.unschedulable.length ?? 0;
  return (
    <span data-testid="reconcile-summary">
      {run ? (
        <Label isCompact color={RUN_COLOR[run.state] ?? 'grey'}>
          last {run.trigger}: {run.state}
        </Label>
      ) : (
        <Label isCompact>no run yet</Label>
      )}{' '}
      {stuck > 0 && (
        <Label isCompact color="red">
          {stuck} unschedulable
        </Label>
      )}
    </span>
  );
}

/** The applied preset's reconcile status: its last run's steps, what fits nowhere and why. */
function ReconcileCard({ preset }: { preset: Preset }) {
  const status = preset.reconcile;
  const run = status?.lastRun;
  return (
    <Card className="sz-mt-md" data-testid="reconcile-card">
      <CardTitle>Reconcile of {preset.name}</CardTitle>
      <CardBody>
        <Content component="p">
          The leader keeps this preset true: it compares it with what the pods run every few seconds and when a pod joins
          or leaves, and loads or unloads the difference.
        </Content>
        <DescriptionList isHorizontal isCompact className="sz-mt-md">
          <DescriptionListGroup>
            <DescriptionListTerm>Applied</DescriptionListTerm>
            <DescriptionListDescription>{formatTimestamp(preset.appliedAt)}</DescriptionListDescription>
          </DescriptionListGroup>
          <DescriptionListGroup>
            <DescriptionListTerm>Last run</DescriptionListTerm>
            <DescriptionListDescription>
              {run ? `${run.trigger}, ${run.state}, ${formatTimestamp(run.startedAt)} – ${formatTimestamp(run.finishedAt)}` : 'none yet'}
            </DescriptionListDescription>
          </DescriptionListGroup>
          {(status?.consecutiveFailures ?? 0) > 0 && (
            <DescriptionListGroup>
              <DescriptionListTerm>Failed passes in a row</DescriptionListTerm>
              <DescriptionListDescription>{status?.consecutiveFailures} (backing off)</DescriptionListDescription>
            </DescriptionListGroup>
          )}
        </DescriptionList>
        {status && status.unschedulable.length > 0 && (
          <>
            <Content component="h3" className="sz-mt-md">
              Unschedulable
            </Content>
            <PresetSteps steps={status.unschedulable} label="Unschedulable replicas" />
          </>
        )}
        {run && run.steps.length > 0 && (
          <>
            <Content component="h3" className="sz-mt-md">
              Last run’s steps
            </Content>
            <PresetSteps steps={run.steps} label="Last run" />
          </>
        )}
      </CardBody>
    </Card>
  );
}

/** One preset: its plan now, Apply with live progress, and its reconcile status. */
function PresetDetail({ preset }: { preset: Preset }) {
  const plan = usePresetPlan(preset.name);
  const { progress, apply, reset } = usePresetApply();
  const canMutate = useCanMutate();
  const busy = progress.phase === 'starting' || progress.phase === 'running';
  return (
    <>
      <Card className="sz-mt-md" data-testid="preset-plan">
        <CardHeader
          actions={{
            actions: (
              <Flex spaceItems={{ default: 'spaceItemsSm' }}>
                <FlexItem>
                  <Button variant="secondary" onClick={() => void plan.refetch()} isLoading={plan.isFetching}>
                    Refresh plan
                  </Button>
                </FlexItem>
                {canMutate && (
                  <FlexItem>
                    <Button
                      variant="primary"
                      isLoading={busy}
                      isDisabled={busy}
                      onClick={() => {
                        reset();
                        apply(preset.name);
                      }}
                    >
                      Apply
                    </Button>
                  </FlexItem>
                )}
              </Flex>
            ),
          }}
        >
          <CardTitle>Plan for {preset.name}</CardTitle>
        </CardHeader>
        <CardBody>
          {plan.isPending && <Loading what="the plan" />}
          {plan.isError && <ErrorState what="the plan" error={plan.error} onRetry={() => void plan.refetch()} />}
          {plan.data && (
            <>
              <Content component="p" data-testid="plan-summary" data-nothing-to-do={String(plan.data.nothingToDo)}>
                {planSummary(plan.data)} <small>(strategy {plan.data.strategy})</small>
              </Content>
              {plan.data.steps.length > 0 && <PresetSteps steps={plan.data.steps} label={`Plan for ${preset.name}`} />}
            </>
          )}
        </CardBody>
      </Card>
      {progress.phase !== 'idle' && (
        <Card className="sz-mt-md">
          <CardTitle>Apply {preset.name}</CardTitle>
          <CardBody>
            <PresetApplyPanel progress={progress} />
          </CardBody>
        </Card>
      )}
      {preset.applied && <ReconcileCard preset={preset} />}
    </>
  );
}

export default function PresetsPage() {
  const presets = usePresets();
  const canMutate = useCanMutate();
  const notify = useNotify();
  const del = useDeletePreset();
  const [params, setParams] = useSearchParams();
  const selectedName = params.get('preset');
  const [editing, setEditing] = useState<Preset | 'new' | null>(null);
  const [deleting, setDeleting] = useState<Preset | null>(null);
  const select = (name: string | null): void => setParams(name ? { preset: name } : {}, { replace: true });
  const selected = presets.data?.find((p) => p.name === selectedName);

  return (
    <>
      <PageHeader
        title="Presets"
        description="Declared desired states of the cluster: which models, how many replicas. Plan shows what an apply would do; the applied preset is kept true by the leader."
        actions={
          canMutate && (
            <Button variant="primary" onClick={() => setEditing('new')}>
              New preset
            </Button>
          )
        }
      />
      <PageSection>
        <Card>
          <CardBody>
            {presets.isPending && <Loading what="presets" />}
            {presets.isError && <ErrorState what="presets" error={presets.error} onRetry={() => void presets.refetch()} />}
            {presets.data?.length === 0 && (
              <Empty title="No presets">{canMutate ? 'Create one with “New preset”.' : 'An admin can create one.'}</Empty>
            )}
            {presets.data && presets.data.length > 0 && (
              <Table aria-label="Presets" variant="compact">
                <Thead>
                  <Tr>
                    <Th>Name</Th>
                    <Th>Models (replicas)</Th>
                    <Th modifier="fitContent">Status</Th>
                    <Th modifier="fitContent">Updated</Th>
                    <Th screenReaderText="Actions" modifier="fitContent" />
                  </Tr>
                </Thead>
                <Tbody>
                  {presets.data.map((p) => (
                    <Tr key={p.name} data-preset={p.name} data-applied={String(p.applied)} isRowSelected={p.name === selectedName}>
                      <Td dataLabel="Name">
                        <Button variant="link" isInline onClick={() => select(p.name)}>
                          {p.name}
                        </Button>
                      </Td>
                      <Td dataLabel="Models">
                        {p.models.map((m) => `${m.servedModelName} ×${m.replicas ?? 1}`).join(', ') || '—'}
                      </Td>
                      <Td dataLabel="Status" modifier="nowrap">
                        {p.applied ? (
                          <>
                            <Label color="blue" isCompact>
                              applied
                            </Label>{' '}
                            <ReconcileSummary status={p.reconcile} />
                          </>
                        ) : (
                          <Label isCompact>not applied</Label>
                        )}
                      </Td>
                      <Td dataLabel="Updated" modifier="nowrap">
                        {formatTimestamp(p.updatedAt)}
                      </Td>
                      <Td dataLabel="Actions" modifier="nowrap">
                        <Button variant="secondary" size="sm" onClick={() => select(p.name)}>
                          Plan
                        </Button>{' '}
                        {canMutate && (
                          <>
                            <Button variant="secondary" size="sm" onClick={() => setEditing(p)}>
                              Edit
                            </Button>{' '}
                            <Button variant="danger" size="sm" onClick={() => setDeleting(p)}>
                              Delete
                            </Button>
                          </>
                        )}
                      </Td>
                    </Tr>
                  ))}
                </Tbody>
              </Table>
            )}
          </CardBody>
        </Card>
        {selected && <PresetDetail key={selected.name} preset={selected} />}
      </PageSection>
      {editing && (
        <PresetEditor
          preset={editing === 'new' ? null : editing}
          onClose={() => setEditing(null)}
          onSaved={(name) => {
            notify('success', `Preset ${name} saved`);
            setEditing(null);
            select(name);
          }}
        />
      )}
      {deleting && (
        <ConfirmModal
          title={`Delete preset ${deleting.name}?`}
          confirmLabel="Delete"
          danger
          busy={del.isPending}
          error={del.error}
          onCancel={() => {
            setDeleting(null);
            del.reset();
          }}
          onConfirm={() =>
            del.mutate(deleting.name, {
              onSuccess: () => {
                notify('success', `Preset ${deleting.name} deleted`);
                if (selectedName === deleting.name) select(null);
                setDeleting(null);
              },
            })
          }
        >
          <p>
            {deleting.applied
              ? 'It is the applied preset: its reconciliation stops. What runs keeps running.'
              : 'Nothing running is touched.'}
          </p>
        </ConfirmModal>
      )}
    </>
  );
}
