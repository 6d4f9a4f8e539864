import {
  Card,
  CardBody,
  CardTitle,
  FormSelect,
  FormSelectOption,
  Label,
  PageSection,
  Switch,
  Toolbar,
  ToolbarContent,
  ToolbarItem,
} from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { Link } from 'react-router';
import { useRequestLogInfo, useRequests, useUsage, type RequestEntry, type UsageRow } from '../api/requests';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { formatMs, formatNumber, formatTimestamp } from '../lib/format';
import { EMPTY_FILTERS, formatTokens, statusColor, type RequestFilters } from '../lib/requests';

const STATUSES: Array<[value: string, label: string]> = [
  ['', 'All statuses'],
  ['2xx', '2xx success'],
  ['error', 'Errors (400+)'],
  ['4xx', '4xx refused'],
  ['5xx', '5xx failed'],
];

function RequestTable({ entries, showPods }: { entries: RequestEntry[]; showPods: boolean }) {
  return (
    <Table aria-label="Request log" variant="compact" gridBreakPoint="grid-lg">
      <Thead>
        <Tr>
          <Th modifier="wrap">Time</Th>
          <Th modifier="wrap">Model</Th>
          {showPods && <Th modifier="fitContent">Pod</Th>}
          <Th modifier="wrap">Instance</Th>
          <Th modifier="wrap">Status</Th>
          <Th modifier="wrap">Latency</Th>
          <Th modifier="wrap">TTFT</Th>
          <Th modifier="wrap">Tokens in / out</Th>
          <Th modifier="wrap">Key</Th>
          <Th modifier="wrap">Request id</Th>
        </Tr>
      </Thead>
      <Tbody>
        {entries.map((e) => (
          <Tr key={e.id} data-testid="request-row">
            <Td dataLabel="Time" className="sz-nowrap">
              {formatTimestamp(e.at)}
            </Td>
            <Td dataLabel="Model" className="sz-wrap-anywhere">
              {e.model}
              {e.stream && (
                <>
                  {' '}
                  <Label isCompact>stream</Label>
                </>
              )}
            </Td>
            {showPods && (
              <Td dataLabel="Pod" modifier="nowrap" data-testid="request-pod">
                {e.pod ?? '—'}
                {e.entryPod && e.entryPod !== e.pod && (
                  <div className="pf-v6-u-font-size-xs pf-v6-u-color-200" data-testid="request-entry-pod">
                    via {e.entryPod}
                  </div>
                )}
              </Td>
            )}
            <Td dataLabel="Instance" className="sz-mono">
              {e.instanceId ? <Link to={`/models/${encodeURIComponent(e.instanceId)}`}>{e.instanceId}</Link> : '—'}
            </Td>
            <Td dataLabel="Status">
              <Label isCompact color={statusColor(e.status)}>
                {e.status}
              </Label>
            </Td>
            <Td dataLabel="Latency" className="sz-nowrap">
              {formatMs(e.latencyMs)}
            </Td>
            <Td dataLabel="TTFT" className="sz-nowrap">
              {formatMs(e.ttftMs)}
            </Td>
            <Td dataLabel="Tokens in / out" className="sz-nowrap">
              {formatTokens(e.promptTokens, e.completionTokens)}
            </Td>
            <Td dataLabel="Key">{e.keyId ?? '—'}</Td>
            <Td dataLabel="Request id" className="sz-mono sz-wrap-anywhere">
              {e.requestId}
            </Td>
          </Tr>
        ))}
      </Tbody>
    </Table>
  );
}

function UsageTable({ rows }: { rows: UsageRow[] }) {
  return (
    <Table aria-label="Usage per key and model" variant="compact">
      <Thead>
        <Tr>
          <Th modifier="wrap">Key</Th>
          <Th modifier="wrap">Model</Th>
          <Th modifier="wrap">Requests</Th>
          <Th modifier="wrap">Prompt tokens</Th>
          <Th modifier="wrap">Completion tokens</Th>
        </Tr>
      </Thead>
      <Tbody>
        {rows.map((r) => (
          <Tr key={`${r.keyId}/${r.model}`}>
            <Td dataLabel="Key">{r.keyId === '_none' ? 'no key' : r.keyId}</Td>
            <Td dataLabel="Model">{r.model}</Td>
            <Td dataLabel="Requests">{formatNumber(r.requests)}</Td>
            <Td dataLabel="Prompt tokens">{formatNumber(r.promptTokens)}</Td>
            <Td dataLabel="Completion tokens">{formatNumber(r.completionTokens)}</Td>
          </Tr>
        ))}
      </Tbody>
    </Table>
  );
}

function Select({ id, label, value, options, onChange }: {
  id: string;
  label: string;
  value: string;
  options: Array<[value: string, label: string]>;
  onChange: (v: string) => void;
}) {
  return (
    <FormSelect id={id} aria-label={label} value={value} onChange={(_e, v) => onChange(v)}>
      {options.map(([v, text]) => (
        <FormSelectOption key={v} value={v} label={text} />
      ))}
    </FormSelect>
  );
}

export default function RequestsPage() {
  const [filters, setFilters] = useState<RequestFilters>(EMPTY_FILTERS);
  const [live, setLive] = useState(true);
  const requests = useRequests(filters, live);
  const usage = useUsage(live);
  const info = useRequestLogInfo(live);
  const pods = info.data?.pods ?? [];
  const showPods = pods.length > 1;
  const set = (patch: Partial<RequestFilters>) => setFilters((f) => ({ ...f, ...patch }));
  const models = usage.data?.byModel.map((r) => r.model) ?? [];
  const keys = usage.data?.byKey.map((r) => r.keyId).filter((k) => k !== '_none') ?? [];

  let body;
  if (requests.isPending) body = <Loading what="the request log" />;
  else if (requests.isError) body = <ErrorState what="the request log" error={requests.error} onRetry={() => void requests.refetch()} />;
  else if (requests.data.length === 0)
    body = <Empty title="No requests">Inference requests (/v1) appear here as they finish.</Empty>;
  else body = <RequestTable entries={requests.data} showPods={showPods} />;

  return (
    <>
      <PageHeader
        title="Requests"
        description="Finished inference requests, newest first: model, pod, instance, status, latency, time to first token, tokens (from the engine's usage) and API key. Never bodies. In a cluster: every pod's, collected every few seconds."
      />
      <PageSection>
        <Card>
          <CardBody>
            <Toolbar>
              <ToolbarContent>
                <ToolbarItem>
                  <Select
                    id="requests-model"
                    label="Model"
                    value={filters.model}
                    options={[['', 'All models'], ...models.map((m): [string, string] => [m, m])]}
                    onChange={(model) => set({ model })}
                  />
                </ToolbarItem>
                {showPods && (
                  <ToolbarItem>
                    <Select
                      id="requests-pod"
                      label="Pod"
                      value={filters.pod}
                      options={[['', 'All pods'], ...pods.map((p): [string, string] => [p, p])]}
                      onChange={(pod) => set({ pod })}
                    />
                  </ToolbarItem>
                )}
                <ToolbarItem>
                  <Select id="requests-status" label="Status" value={filters.status} options={STATUSES} onChange={(status) => set({ status })} />
                </ToolbarItem>
                {keys.length > 0 && (
                  <ToolbarItem>
                    <Select
                      id="requests-key"
                      label="API key"
                      value={filters.key}
                      options={[['', 'All keys'], ...keys.map((k): [string, string] => [k, k])]}
                      onChange={(key) => set({ key })}
                    />
                  </ToolbarItem>
                )}
                <ToolbarItem alignItems="center">
                  <Switch id="requests-live" label="Live" isChecked={live} onChange={(_e, v) => setLive(v)} />
                </ToolbarItem>
                <ToolbarItem alignItems="center">
                  <span data-testid="request-count">{requests.data?.length ?? 0} shown</span>
                </ToolbarItem>
              </ToolbarContent>
            </Toolbar>
            {body}
          </CardBody>
        </Card>
      </PageSection>
      <PageSection>
        <Card>
          <CardTitle>Usage per key and model</CardTitle>
          <CardBody>
            {usage.isPending ? (
              <Loading what="usage" />
            ) : usage.isError ? (
              <ErrorState what="usage" error={usage.error} onRetry={() => void usage.refetch()} />
            ) : usage.data.rows.length === 0 ? (
              <Empty title="Nothing counted yet" />
            ) : (
              <UsageTable rows={usage.data.rows} />
            )}
          </CardBody>
        </Card>
      </PageSection>
    </>
  );
}
