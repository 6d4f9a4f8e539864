// The catalog page's LoRA adapters: each under its base, where it is loaded, and (admins)
// load and unload with the API's refusals shown in the card.

import { Alert, AlertActionCloseButton, Button, Card, CardBody, CardTitle, Flex, FlexItem, Label, type LabelProps } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { Link } from 'react-router';
import { useAdapterAction, useAdapters, type AdapterAction } from '../api/adapters';
import type { CatalogModel } from '../api/catalog';
import { isMissingRoute } from '../api/client';
import { useCanMutate } from '../auth/AuthContext';
import { actionBlocked, adapterActionError, adapterRows, placementLabel, type AdapterRow, type AdapterRowState } from '../lib/adapters';
import { useNotify } from './Notifications';
import { Empty, ErrorState, Loading } from './States';

const STATE_COLORS: Record<AdapterRowState, NonNullable<LabelProps['color']>> = {
  active: 'green',
  sleeping: 'purple',
  unloaded: 'grey',
  invalid: 'red',
};

function ActionButton({ row, action, busy, onClick }: { row: AdapterRow; action: AdapterAction; busy: boolean; onClick: () => void }) {
  const blocked = actionBlocked(row, action);
  const label = action === 'load' ? 'Load' : 'Unload';
  return (
    <FlexItem>
      <Button
        variant={action === 'load' ? 'secondary' : 'link'}
        isDanger={action === 'unload'}
        size="sm"
        onClick={onClick}
        isLoading={busy}
        isDisabled={blocked !== null || busy}
        aria-label={`${label} ${row.name}`}
      >
        {label}
      </Button>
      {blocked && <div className="sz-action-hint">{blocked}</div>}
    </FlexItem>
  );
}

export function AdaptersCard({ catalog }: { catalog: CatalogModel[] | undefined }) {
  const adapters = useAdapters();
  const act = useAdapterAction();
  const canMutate = useCanMutate();
  const notify = useNotify();
  const [failure, setFailure] = useState<string | null>(null);
  const pending = act.isPending ? act.variables : undefined;
  // A server without adapter support (older version) has no such route: no card then.
  if (adapters.isError && isMissingRoute(adapters.error)) return null;
  const rows = adapters.data ? adapterRows(adapters.data, catalog) : [];

  const run = (name: string, action: AdapterAction): void => {
    setFailure(null);
    act.mutate(
      { name, action },
      {
        onSuccess: () => notify('success', `Adapter ${name} ${action === 'load' ? 'loaded' : 'unloaded'}`),
        onError: (e) => setFailure(adapterActionError(name, action, e)),
      },
    );
  };

  return (
    <Card>
      <CardTitle component="h2">LoRA adapters</CardTitle>
      <CardBody>
        {failure && (
          <Alert
            isInline
            variant="danger"
            title={failure}
            className="sz-mb-md"
            data-testid="adapter-error"
            actionClose={<AlertActionCloseButton onClose={() => setFailure(null)} />}
          />
        )}
        {adapters.isPending && <Loading what="the adapters" />}
        {adapters.isError && <ErrorState what="the adapters" error={adapters.error} onRetry={() => void adapters.refetch()} />}
        {adapters.data && rows.length === 0 && (
          <Empty title="No LoRA adapters">Add an entry with “Adapter of” naming a base with LoRA slots.</Empty>
        )}
        {rows.length > 0 && (
          <Table aria-label="LoRA adapters" variant="compact" gridBreakPoint="grid-md">
            <Thead>
              <Tr>
                <Th width={15}>Base</Th>
                <Th width={15}>Adapter</Th>
                <Th modifier="fitContent">State</Th>
                <Th width={20}>Loaded on</Th>
                <Th width={30}>Folder</Th>
                {canMutate && <Th screenReaderText="Actions" />}
              </Tr>
            </Thead>
            <Tbody>
              {rows.map((r) => (
                <Tr key={r.name} data-adapter-name={r.name} data-state={r.state}>
                  <Td dataLabel="Base">{r.base ?? '—'}</Td>
                  <Td dataLabel="Adapter">
                    <strong>{r.name}</strong>
                    {r.aliases.length ? <div className="sz-wrap-anywhere">aka {r.aliases.join(', ')}</div> : null}
                  </Td>
                  <Td dataLabel="State">
                    <Label isCompact color={STATE_COLORS[r.state]}>
                      {r.state}
                    </Label>
                    {r.error && <div className="sz-failure-reason">{r.error}</div>}
                  </Td>
                  <Td dataLabel="Loaded on">
                    {r.loadedOn.length === 0
                      ? '—'
                      : r.loadedOn.map((p) => (
                          <div key={`${p.podId ?? ''}/${p.instanceId}`} data-placement={p.instanceId}>
                            <Link to={`/models/${p.instanceId}`} className="sz-mono sz-wrap-anywhere">
                              {placementLabel(p)}
                            </Link>
                            {p.sleeping && ' (sleeping)'}
                            {p.inFlight > 0 && ` · ${p.inFlight} in flight`}
                          </div>
                        ))}
                  </Td>
                  <Td dataLabel="Folder" className="sz-mono sz-wrap-anywhere">
                    {r.adapterPath ?? '—'}
                  </Td>
                  {canMutate && (
                    <Td dataLabel="Actions">
                      <Flex spaceItems={{ default: 'spaceItemsSm' }} flexWrap={{ default: 'nowrap' }}>
                        {(['load', 'unload'] as const).map((a) => (
                          <ActionButton key={a} row={r} action={a} busy={pending?.name === r.name && pending.action === a} onClick={() => run(r.name, a)} />
                        ))}
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
  );
}
