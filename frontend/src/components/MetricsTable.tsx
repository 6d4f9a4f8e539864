import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import type { BenchmarkScenario } from '../api/types';
import { METRICS, metricValue, scenarioTitle } from '../lib/benchmarks';

/** Every metric (rows) of every scenario (columns). */
export function MetricsTable({ scenarios }: { scenarios: BenchmarkScenario[] }) {
  return (
    <Table aria-label="Benchmark results" variant="compact" isStickyHeader>
      <Thead>
        <Tr>
          <Th>Metric</Th>
          {scenarios.map((s, i) => (
            <Th key={s.id} modifier="wrap">
              {scenarioTitle(s, i)}
            </Th>
          ))}
        </Tr>
      </Thead>
      <Tbody>
        {METRICS.map((m) => (
          <Tr key={m.key} data-metric={m.key}>
            <Td dataLabel="Metric">{m.label}</Td>
            {scenarios.map((s, i) => (
              <Td key={s.id} dataLabel={`#${i + 1}`} className="sz-nowrap">
                {m.format(metricValue(s.metrics, m.key))}
              </Td>
            ))}
          </Tr>
        ))}
      </Tbody>
    </Table>
  );
}
