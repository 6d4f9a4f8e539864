import {
  Alert,
  Button,
  Card,
  CardBody,
  CardTitle,
  DescriptionList,
  DescriptionListDescription,
  DescriptionListGroup,
  DescriptionListTerm,
  Flex,
  FlexItem,
  PageSection,
  Progress,
  ProgressMeasureLocation,
} from '@patternfly/react-core';
import { useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { useParams } from 'react-router';
import { keys, useBenchmark, useCancelBenchmark } from '../api/queries';
import type { BenchmarkProgress, BenchmarkRun, BenchmarkScenario } from '../api/types';
import { useCanMutate } from '../auth/AuthContext';
import { BarChart } from '../components/BarChart';
import { ButtonLink } from '../components/ButtonLink';
import { MetricsTable } from '../components/MetricsTable';
import { PageHeader } from '../components/PageHeader';
import { RunStatusLabel } from '../components/RunStatusLabel';
import { ErrorState, Loading } from '../components/States';
import { useEventStream } from '../hooks/useEventStream';
import { applyProgress, GRID_ROWS, GRID_STATS, gridValue, latencyBars, scenarioPercent, scenarioTitle } from '../lib/benchmarks';
import { LatencyCdf } from '../components/LatencyCdf';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { formatDuration, formatMs, formatTimestamp } from '../lib/format';

function ScenarioProgress({ s, index, progress }: { s: BenchmarkScenario; index: number; progress?: BenchmarkProgress }) {
  const percent = scenarioPercent(s, progress);
  const phase = progress && s.status === 'running' ? ` · ${progress.phase} ${progress.completed}/${progress.total}` : '';
  return (
    <div className="sz-mb-md" data-scenario-id={s.id}>
      <Flex spaceItems={{ default: 'spaceItemsSm' }}>
        <FlexItem>{scenarioTitle(s, index)}</FlexItem>
        <FlexItem>
          <RunStatusLabel status={s.status} />
        </FlexItem>
        {s.promptSource === 'approximate' && <FlexItem>(prompt sizes approximate: no tokenizer endpoint)</FlexItem>}
      </Flex>
      <Progress
        value={percent}
        title={`${s.successfulRequests} ok, ${s.failedRequests} failed${phase}`}
        measureLocation={ProgressMeasureLocation.outside}
        variant={s.status === 'failed' ? 'danger' : s.status === 'completed' ? 'success' : undefined}
        aria-label={`Scenario ${index + 1} progress`}
      />
      {s.errorMessage && <Alert isInline isPlain variant="danger" title={s.errorMessage} />}
    </div>
  );
}

/** One scenario's results: a grid (latency families x statistics), goodput and throughput,
 * and its latency distributions with the SLA. */
function ScenarioResults({ s, index }: { s: BenchmarkScenario; index: number }) {
  const m = s.metrics;
  if (!m) return null;
  return (
    <PageSection>
      <Card data-results-for={s.id}>
        <CardTitle>{scenarioTitle(s, index)}</CardTitle>
        <CardBody>
          <Table aria-label={`Results of scenario ${index + 1}`} variant="compact" className="sz-mb-md">
            <Thead>
              <Tr>
                <Th>Metric</Th>
                {GRID_STATS.map((stat) => (
                  <Th key={stat} modifier="nowrap">
                    {stat.toLowerCase()}
                  </Th>
                ))}
              </Tr>
            </Thead>
            <Tbody>
              {GRID_ROWS.map((row) => (
                <Tr key={row.prefix} data-grid-row={row.prefix}>
                  <Td dataLabel="Metric">{row.label}</Td>
                  {GRID_STATS.map((stat) => (
                    <Td key={stat} dataLabel={stat.toLowerCase()} modifier="nowrap">
                      {row.format(gridValue(m, row.prefix, stat))}
                    </Td>
                  ))}
                </Tr>
              ))}
            </Tbody>
          </Table>
          <p className="sz-mb-md">
            Goodput {m.goodputCount} of {s.successfulRequests} ok ({m.goodputPercent.toFixed(1)}%
            {s.slaThresholdMs !== null ? `, E2E within ${formatMs(s.slaThresholdMs)}` : ', no SLA'}) ·{' '}
            {m.requestsPerSecond.toFixed(2)} req/s · {m.tokensPerSecondTotal.toFixed(1)} output tok/s
          </p>
          <LatencyCdf metrics={m} slaMs={s.slaThresholdMs} />
        </CardBody>
      </Card>
    </PageSection>
  );
}

/** Applies one SSE event of the run to the cached run. */
function applyEvent(run: BenchmarkRun | undefined, event: string, data: unknown): BenchmarkRun | undefined {
  if (event === 'snapshot' || event === 'done') return data as BenchmarkRun;
  if (!run) return run;
  if (event === 'status') return { ...run, status: (data as { status: BenchmarkRun['status'] }).status };
  if (event === 'scenario') {
    const sc = data as BenchmarkScenario;
    return { ...run, scenarios: run.scenarios.map((s) => (s.id === sc.id ? sc : s)) };
  }
  return run;
}

export default function BenchmarkRunPage() {
  const { id = '' } = useParams();
  const run = useBenchmark(id);
  const qc = useQueryClient();
  const canMutate = useCanMutate();
  const cancel = useCancelBenchmark();
  const [progress, setProgress] = useState<Record<string, BenchmarkProgress>>({});

  const stream = useEventStream(
    `/api/benchmarks/${encodeURIComponent(id)}/events`,
    {
      onMessage: ({ event, data }) => {
        const payload = JSON.parse(data) as unknown;
        if (event === 'progress') {
          const p = payload as BenchmarkProgress;
          setProgress((all) => ({ ...all, [p.scenarioId]: p }));
          // The counters shown are the run's own, kept as the API counts them.
          qc.setQueryData<BenchmarkRun>(keys.benchmark(id), (old) => (old ? applyProgress(old, p) : old));
          return;
        }
        qc.setQueryData<BenchmarkRun>(keys.benchmark(id), (old) => applyEvent(old, event, payload));
        if (event === 'done') void qc.invalidateQueries({ queryKey: keys.benchmarks, exact: true });
      },
    },
    false,
  );

  if (run.isPending) return <Loading what="the benchmark run" />;
  if (run.isError) return <ErrorState what="the benchmark run" error={run.error} onRetry={() => void run.refetch()} />;
  const r = run.data;
  const finished = r.status === 'completed' || r.status === 'failed' || r.status === 'cancelled';
  const withMetrics = r.scenarios.filter((s) => s.metrics !== null);

  return (
    <>
      <PageHeader
        title={r.name ?? `Run ${r.id.slice(0, 8)}`}
        description={
          <Flex spaceItems={{ default: 'spaceItemsSm' }}>
            <FlexItem>
              <RunStatusLabel status={r.status} />
            </FlexItem>
            <FlexItem>{!finished && stream.state === 'open' ? 'live' : ''}</FlexItem>
          </Flex>
        }
        actions={
          <Flex spaceItems={{ default: 'spaceItemsSm' }}>
            {canMutate && !finished && (
              <FlexItem>
                <Button variant="danger" onClick={() => cancel.mutate(r.id)} isLoading={cancel.isPending}>
                  Cancel run
                </Button>
              </FlexItem>
            )}
            <FlexItem>
              <ButtonLink to="/benchmarks" variant="secondary">
                All runs
              </ButtonLink>
            </FlexItem>
          </Flex>
        }
      />
      {r.errorMessage && (
        <PageSection>
          <Alert isInline variant={r.status === 'cancelled' ? 'warning' : 'danger'} title={r.errorMessage} />
        </PageSection>
      )}
      <PageSection>
        <Card>
          <CardTitle>Progress</CardTitle>
          <CardBody>
            <DescriptionList isCompact isHorizontal columnModifier={{ lg: '2Col' }} className="sz-mb-md">
              {(
                [
                  ['Mode', r.mode],
                  ['kvcached', r.kvcachedEnabled ? 'on' : 'off'],
                  ['Created', formatTimestamp(r.createdAt)],
                  ['Duration', formatDuration(r.durationSeconds)],
                  ['Requests', `${r.successfulRequests} ok, ${r.failedRequests} failed of ${r.totalRequests}`],
                ] as const
              ).map(([term, value]) => (
                <DescriptionListGroup key={term}>
                  <DescriptionListTerm>{term}</DescriptionListTerm>
                  <DescriptionListDescription data-run-field={term.toLowerCase()}>{value}</DescriptionListDescription>
                </DescriptionListGroup>
              ))}
            </DescriptionList>
            {r.scenarios.map((s, i) => (
              <ScenarioProgress key={s.id} s={s} index={i} progress={progress[s.id]} />
            ))}
          </CardBody>
        </Card>
      </PageSection>
      {withMetrics.length > 0 && (
        <>
          {r.scenarios.map((s, i) => (s.metrics ? <ScenarioResults key={s.id} s={s} index={i} /> : null))}
          <PageSection>
            <Card>
              <CardTitle>Latency percentiles, all scenarios (ms)</CardTitle>
              <CardBody>
                <BarChart groups={latencyBars(r)} format={formatMs} />
              </CardBody>
            </Card>
          </PageSection>
          <PageSection>
            <Card>
              <CardTitle>All metrics by scenario</CardTitle>
              <CardBody>
                <MetricsTable scenarios={r.scenarios} />
              </CardBody>
            </Card>
          </PageSection>
        </>
      )}
    </>
  );
}
