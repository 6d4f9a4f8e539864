import { Button, Card, CardBody, Flex, FlexItem, PageSection } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { Link, useNavigate } from 'react-router';
import { isMissingRoute } from '../api/client';
import { useBenchmarks, useDeleteBenchmark } from '../api/queries';
import type { BenchmarkRun } from '../api/types';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { ConfirmModal } from '../components/ConfirmModal';
import { PageHeader } from '../components/PageHeader';
import { RunStatusLabel } from '../components/RunStatusLabel';
import { Empty, ErrorState, Loading } from '../components/States';
import { formatDuration, formatTimestamp } from '../lib/format';

export default function BenchmarksPage() {
  const runs = useBenchmarks();
  const canMutate = useCanMutate();
  const navigate = useNavigate();
  const [selected, setSelected] = useState<string[]>([]);
  const [deleting, setDeleting] = useState<BenchmarkRun | null>(null);
  const remove = useDeleteBenchmark();

  const toggle = (id: string, on: boolean): void =>
    setSelected((s) => (on ? [...s.filter((x) => x !== id), id].slice(-2) : s.filter((x) => x !== id)));

  const actions = (
    <Flex spaceItems={{ default: 'spaceItemsSm' }}>
      <FlexItem>
        <Button
          variant="secondary"
          isDisabled={selected.length !== 2}
          onClick={() => void navigate(`/benchmarks/compare?a=${selected[0]}&b=${selected[1]}`)}
        >
          Compare selected
        </Button>
      </FlexItem>
      {canMutate && (
        <FlexItem>
          <ButtonLink to="/benchmarks/new" variant="primary">
            New benchmark
          </ButtonLink>
        </FlexItem>
      )}
    </Flex>
  );

  let body;
  if (runs.isPending) body = <Loading what="benchmark runs" />;
  else if (runs.isError && isMissingRoute(runs.error)) body = <Empty title="Benchmarks are not available on this server" />;
  else if (runs.isError) body = <ErrorState what="benchmark runs" error={runs.error} onRetry={() => void runs.refetch()} />;
  else if (runs.data.length === 0) {
    body = (
      <Empty title="No benchmark runs yet">
        {canMutate ? 'Start one with “New benchmark”: it measures TTFT, decode rate and latency of loaded models.' : 'An admin can start one.'}
      </Empty>
    );
  } else {
    body = (
      <Table aria-label="Benchmark runs" variant="compact" gridBreakPoint="grid-md">
        <Thead>
          <Tr>
            <Th screenReaderText="Select" />
            <Th>Name</Th>
            <Th>Status</Th>
            <Th>Mode</Th>
            <Th>Scenarios</Th>
            <Th>Requests ok / failed</Th>
            <Th>Created</Th>
            <Th>Duration</Th>
            {canMutate && <Th screenReaderText="Actions" />}
          </Tr>
        </Thead>
        <Tbody>
          {runs.data.map((run, rowIndex) => (
            <Tr key={run.id} data-run-id={run.id}>
              <Td
                select={{ rowIndex, isSelected: selected.includes(run.id), onSelect: (_e, on) => toggle(run.id, on) }}
                aria-label={`Select ${run.name ?? run.id} for comparison`}
              />
              <Td dataLabel="Name">
                <Link to={`/benchmarks/${run.id}`}>{run.name ?? run.id.slice(0, 8)}</Link>
              </Td>
              <Td dataLabel="Status">
                <RunStatusLabel status={run.status} />
              </Td>
              <Td dataLabel="Mode">{run.mode}</Td>
              <Td dataLabel="Scenarios">{run.scenarios.length}</Td>
              <Td dataLabel="Requests">
                {run.successfulRequests} / {run.failedRequests} of {run.totalRequests}
              </Td>
              <Td dataLabel="Created">{formatTimestamp(run.createdAt)}</Td>
              <Td dataLabel="Duration">{formatDuration(run.durationSeconds)}</Td>
              {canMutate && (
                <Td dataLabel="Actions">
                  <Button variant="link" isDanger size="sm" onClick={() => setDeleting(run)}>
                    Delete
                  </Button>
                </Td>
              )}
            </Tr>
          ))}
        </Tbody>
      </Table>
    );
  }

  return (
    <>
      <PageHeader title="Benchmarks" description="Load tests against loaded models; select two runs to compare them." actions={actions} />
      <PageSection>
        <Card>
          <CardBody>{body}</CardBody>
        </Card>
      </PageSection>
      {deleting && (
        <ConfirmModal
          title={`Delete run ${deleting.name ?? deleting.id}?`}
          confirmLabel="Delete"
          danger
          busy={remove.isPending}
          error={remove.error}
          onCancel={() => {
            setDeleting(null);
            remove.reset();
          }}
          onConfirm={() =>
            remove.mutate(deleting.id, {
              onSuccess: () => {
                setSelected((s) => s.filter((x) => x !== deleting.id));
                setDeleting(null);
              },
            })
          }
        >
          <p>The run, its scenarios and their metrics are deleted{deleting.status === 'running' ? ' (it is cancelled first)' : ''}.</p>
        </ConfirmModal>
      )}
    </>
  );
}
