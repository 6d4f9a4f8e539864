import { Button, Card, CardBody, Label, PageSection } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { Link } from 'react-router';
import { isMissingRoute } from '../api/client';
import { useAudit } from '../api/queries';
import type { AuditEntry } from '../api/types';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { formatTimestamp } from '../lib/format';

const OUTCOME_COLOR: Record<string, 'green' | 'orange' | 'red'> = { ok: 'green', denied: 'orange', error: 'red' };

/** What the request acted on: the instance (linked), the model, the benchmark run. */
function AuditTarget({ entry }: { entry: AuditEntry }) {
  const parts = [];
  if (entry.instanceId)
    parts.push(
      <div key="i" className="sz-mono">
        <Link to={`/models/${encodeURIComponent(entry.instanceId)}`}>{entry.instanceId}</Link>
      </div>,
    );
  if (entry.model) parts.push(<div key="m">{entry.model}</div>);
  if (entry.runId)
    parts.push(
      <div key="r" className="sz-mono">
        <Link to={`/benchmarks/${encodeURIComponent(entry.runId)}`}>run {entry.runId}</Link>
      </div>,
    );
  return parts.length > 0 ? <>{parts}</> : <>—</>;
}

function AuditTable({ entries }: { entries: AuditEntry[] }) {
  return (
    <Table aria-label="Audit log" variant="compact" gridBreakPoint="grid-md">
      <Thead>
        <Tr>
          <Th>Time</Th>
          <Th>Who</Th>
          <Th>Role</Th>
          <Th>Request</Th>
          <Th>Target</Th>
          <Th>Status</Th>
          <Th>From</Th>
        </Tr>
      </Thead>
      <Tbody>
        {entries.map((e, i) => (
          <Tr key={e.id ?? `${e.at}-${i}`}>
            <Td dataLabel="Time" className="sz-nowrap">
              {formatTimestamp(e.at)}
            </Td>
            <Td dataLabel="Who">{e.subject}</Td>
            <Td dataLabel="Role">{e.role ?? '—'}</Td>
            <Td dataLabel="Request" className="sz-mono sz-wrap-anywhere">
              {e.method} {e.path}
            </Td>
            <Td dataLabel="Target" className="sz-wrap-anywhere">
              <AuditTarget entry={e} />
            </Td>
            <Td dataLabel="Status">
              <Label isCompact color={OUTCOME_COLOR[e.outcome] ?? 'grey'}>
                {e.status} {e.outcome}
              </Label>
              {e.code && <div className="sz-mono pf-v6-u-font-size-xs">{e.code}</div>}
            </Td>
            <Td dataLabel="From">{e.remote ?? '—'}</Td>
          </Tr>
        ))}
      </Tbody>
    </Table>
  );
}

export default function AuditPage() {
  // A stack of page cursors: null is the newest page.
  const [cursors, setCursors] = useState<Array<number | null>>([null]);
  const cursor = cursors[cursors.length - 1] ?? null;
  const audit = useAudit(cursor);
  const oldest = audit.data?.[audit.data.length - 1]?.id ?? null;

  let body;
  if (audit.isPending) body = <Loading what="the audit log" />;
  else if (audit.isError && isMissingRoute(audit.error)) body = <Empty title="This server keeps no audit log yet" />;
  else if (audit.isError) body = <ErrorState what="the audit log" error={audit.error} onRetry={() => void audit.refetch()} />;
  else if (audit.data.length === 0) body = <Empty title="Nothing recorded">Loads, unloads and other changes appear here.</Empty>;
  else body = <AuditTable entries={audit.data} />;

  return (
    <>
      <PageHeader
        title="Audit log"
        description="Every state-changing admin request: who, what, when and how it ended. Newest first."
        actions={
          <>
            <Button variant="secondary" isDisabled={cursors.length === 1} onClick={() => setCursors((c) => c.slice(0, -1))}>
              Newer
            </Button>{' '}
            <Button
              variant="secondary"
              isDisabled={oldest === null || (audit.data?.length ?? 0) < 50}
              onClick={() => setCursors((c) => [...c, oldest])}
            >
              Older
            </Button>
          </>
        }
      />
      <PageSection>
        <Card>
          <CardBody>{body}</CardBody>
        </Card>
      </PageSection>
    </>
  );
}
