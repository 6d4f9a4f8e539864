import { Card, CardBody, CardTitle, Label, PageSection } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useSearchParams } from 'react-router';
import { useBenchmark } from '../api/queries';
import type { BenchmarkRun } from '../api/types';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { compareValue, METRICS, metricValue, pairScenarios, type Delta } from '../lib/benchmarks';
import { formatTimestamp } from '../lib/format';

const runName = (r: BenchmarkRun): string => r.name ?? r.id.slice(0, 8);

function DeltaLabel({ delta }: { delta: Delta }) {
  if (delta.ratio === null) return <>—</>;
  const text = `${delta.ratio > 0 ? '+' : ''}${(delta.ratio * 100).toFixed(1)}%`;
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
          <Card>
            <CardTitle>{pair.title}</CardTitle>
            <CardBody>
              {!pair.a || !pair.b ? (
                <Empty title="Only one run has this scenario">Runs are compared scenario by scenario, in order.</Empty>
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
                            <DeltaLabel delta={compareValue(va, vb, m.better)} />
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

export default function BenchmarkComparePage() {
  const [params] = useSearchParams();
  const a = useBenchmark(params.get('a') ?? '');
  const b = useBenchmark(params.get('b') ?? '');
  let body;
  if (!params.get('a') || !params.get('b')) body = <Empty title="Choose two runs">Select two runs on the Benchmarks page.</Empty>;
  else if (a.isPending || b.isPending) body = <Loading what="the runs" />;
  else if (a.isError) body = <ErrorState what="run A" error={a.error} />;
  else if (b.isError) body = <ErrorState what="run B" error={b.error} />;
  else body = <Comparison a={a.data} b={b.data} />;
  const description =
    a.data && b.data
      ? `A: ${runName(a.data)} (${formatTimestamp(a.data.createdAt)}) · B: ${runName(b.data)} (${formatTimestamp(b.data.createdAt)}). Green: B is better.`
      : undefined;
  return (
    <>
      <PageHeader title="Compare runs" description={description} />
      {body}
    </>
  );
}
