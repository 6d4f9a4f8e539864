import {
  Alert,
  Card,
  CardBody,
  CardTitle,
  Content,
  FormGroup,
  FormSelect,
  FormSelectOption,
  Grid,
  GridItem,
  Label,
  PageSection,
} from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useSearchParams } from 'react-router';
import { ApiError } from '../api/client';
import { useBenchmark, useBenchmarks } from '../api/queries';
import type { BenchmarkRun } from '../api/types';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { compareValue, deltaText, METRICS, metricValue, pairScenarios, type Delta, type MetricDef } from '../lib/benchmarks';
import { formatTimestamp } from '../lib/format';

const runName = (r: BenchmarkRun): string => r.name ?? r.id.slice(0, 8);

function DeltaLabel({ delta, kind }: { delta: Delta; kind: MetricDef['delta'] }) {
  const text = deltaText(delta, kind);
  if (text === '—') return <>—</>;
  const color = delta.verdict === 'better' ? 'green' : delta.verdict === 'worse' ? 'red' : 'grey';
  return (
    <Label isCompact color={color} data-verdict={delta.verdict}>
      {text}
    </Label>
  );
}

function Comparison({ a, b }: { a: BenchmarkRun; b: BenchmarkRun }) {
  return (
    <>
      {pairScenarios(a, b).map((pair) => (
        <PageSection key={pair.title}>
          <Card data-pair={pair.title}>
            <CardTitle>{pair.title}</CardTitle>
            <CardBody>
              {pair.concurrency && (
                <Content component="small" data-testid="pair-note">
                  Different concurrency: the same model and request shape at c={pair.concurrency.a} in A and c=
                  {pair.concurrency.b} in B.
                </Content>
              )}
              {!pair.a || !pair.b ? (
                <Empty title={`Only run ${pair.a ? 'A' : 'B'} has this scenario`}>
                  Scenarios are paired by model, routing and token shape, at the same concurrency first, then
                  across concurrencies.
                </Empty>
              ) : (
                <Table aria-label={`Comparison of ${pair.title}`} variant="compact">
                  <Thead>
                    <Tr>
                      <Th>Metric</Th>
                      <Th>A: {runName(a)}</Th>
                      <Th>B: {runName(b)}</Th>
                      <Th>B vs A</Th>
                    </Tr>
                  </Thead>
                  <Tbody>
                    {METRICS.map((m) => {
                      const va = metricValue(pair.a?.metrics ?? null, m.key);
                      const vb = metricValue(pair.b?.metrics ?? null, m.key);
                      return (
                        <Tr key={m.key}>
                          <Td dataLabel="Metric">{m.label}</Td>
                          <Td dataLabel="A">{m.format(va)}</Td>
                          <Td dataLabel="B">{m.format(vb)}</Td>
                          <Td dataLabel="B vs A">
                            <DeltaLabel delta={compareValue(va, vb, m.better)} kind={m.delta} />
                          </Td>
                        </Tr>
                      );
                    })}
                  </Tbody>
                </Table>
              )}
            </CardBody>
          </Card>
        </PageSection>
      ))}
    </>
  );
}

const pickerLabel = (r: BenchmarkRun): string => `${runName(r)} · ${r.status} · ${formatTimestamp(r.createdAt)}`;

/** Two selects over the stored runs; choosing one rewrites `?a=&b=`.
 *
 * Side by side, half the width each: a long run name is cut with an ellipsis that
 * stays clear of the select's arrow (`.sz-run-picker` in app.css), and the whole
 * label is the select's tooltip. */
function RunPickers({ a, b, onPick }: { a: string; b: string; onPick: (which: 'a' | 'b', id: string) => void }) {
  const runs = useBenchmarks();
  if (runs.isPending) return <Loading what="the runs" />;
  if (runs.isError) return <ErrorState what="the runs" error={runs.error} onRetry={() => void runs.refetch()} />;
  const pick = (which: 'a' | 'b', value: string) => {
    const chosen = runs.data.find((r) => r.id === value);
    return (
      <FormGroup label={`Run ${which.toUpperCase()}`} fieldId={`compare-${which}`}>
        <FormSelect
          id={`compare-${which}`}
          className="sz-run-picker"
          value={chosen ? value : ''}
          onChange={(_, v) => onPick(which, v)}
          aria-label={`Run ${which.toUpperCase()}`}
          title={chosen ? pickerLabel(chosen) : 'Choose a run'}
        >
          <FormSelectOption value="" label="Choose a run" isPlaceholder />
          {runs.data.map((r) => (
            <FormSelectOption key={r.id} value={r.id} label={pickerLabel(r)} />
          ))}
        </FormSelect>
      </FormGroup>
    );
  };
  return (
    <Grid hasGutter md={6}>
      <GridItem>{pick('a', a)}</GridItem>
      <GridItem>{pick('b', b)}</GridItem>
    </Grid>
  );
}

/** A fetched run, or why it cannot be shown (unknown id, or an answer that is not a run). */
function problem(id: string, q: ReturnType<typeof useBenchmark>, which: string): string | null {
  if (!id) return null;
  if (q.isError) {
    return q.error instanceof ApiError && q.error.status === 404
      ? `Run ${which} (${id}) does not exist: choose another.`
      : `Run ${which} could not be loaded: ${q.error.message}`;
  }
  if (q.data && !Array.isArray((q.data as Partial<BenchmarkRun>).scenarios)) return `Run ${which} (${id}) is not a benchmark run.`;
  return null;
}

export default function BenchmarkComparePage() {
  const [params, setParams] = useSearchParams();
  const idA = params.get('a') ?? '';
  const idB = params.get('b') ?? '';
  const a = useBenchmark(idA);
  const b = useBenchmark(idB);
  const onPick = (which: 'a' | 'b', id: string): void => {
    const next = new URLSearchParams(params);
    if (id) next.set(which, id);
    else next.delete(which);
    setParams(next, { replace: true });
  };
  const problems = [problem(idA, a, 'A'), problem(idB, b, 'B')].filter((p): p is string => p !== null);
  const ready = idA && idB && a.data && b.data && problems.length === 0;
  let body;
  if (ready) body = <Comparison a={a.data!} b={b.data!} />;
  else if ((idA && a.isPending) || (idB && b.isPending)) body = <Loading what="the runs" />;
  else
    body = (
      <PageSection>
        <Empty title={idA || idB ? 'Choose the other run' : 'Choose two runs'}>
          Pick a run for A and one for B above, or select two on the Benchmarks page.
        </Empty>
      </PageSection>
    );
  const description = ready
    ? `A: ${runName(a.data!)} (${formatTimestamp(a.data!.createdAt)}) · B: ${runName(b.data!)} (${formatTimestamp(b.data!.createdAt)}). Green: B is better.`
    : undefined;
  return (
    <>
      <PageHeader title="Compare runs" description={description} />
      <PageSection>
        <RunPickers a={idA} b={idB} onPick={onPick} />
        {problems.map((p) => (
          <Alert key={p} isInline variant="warning" title={p} className="sz-mt-md" />
        ))}
      </PageSection>
      {body}
    </>
  );
}
