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
import { latencyBars, scenarioPercent, scenarioTitle } from '../lib/benchmarks';
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
                  <DescriptionListDescription>{value}</DescriptionListDescription>
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
          <PageSection>
            <Card>
              <CardTitle>Latency (ms)</CardTitle>
              <CardBody>
                <BarChart groups={latencyBars(r)} format={formatMs} />
              </CardBody>
            </Card>
          </PageSection>
          <PageSection>
            <Card>
              <CardTitle>Results</CardTitle>
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
