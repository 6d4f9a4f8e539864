import { Content } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { SAMPLE_SECONDS, useMetricsHistory } from '../hooks/MetricsHistory';
import { formatMs, formatNumber } from '../lib/format';
import { Empty } from './States';

const ms = (seconds: number | null): string => formatMs(seconds === null ? null : seconds * 1000);

/** Requests per second and latency per model over the last sampling interval. */
export function RequestSummary() {
  const { points, error } = useMetricsHistory();
  const latest = [...points].reverse().find((p) => p.models !== null);
  if (error && !latest) return <Content component="p">Metrics unavailable: {error.message}</Content>;
  if (!latest?.models) return <Content component="p">Measuring: the first rates appear after {SAMPLE_SECONDS} s.</Content>;
  if (latest.models.length === 0) {
    return <Empty title="No inference traffic yet">Send OpenAI requests to /v1 with a loaded model's name.</Empty>;
  }
  const total = latest.models.reduce((sum, m) => sum + m.requestsPerSecond, 0);
  return (
    <>
      <Content component="p">
        <strong data-testid="total-rps">{formatNumber(total)}</strong> requests/s in the last {SAMPLE_SECONDS} s
      </Content>
      <Table aria-label="Requests per model" variant="compact">
        <Thead>
          <Tr>
            <Th>Model</Th>
            <Th modifier="fitContent">req/s</Th>
            <Th modifier="fitContent">p50</Th>
            <Th modifier="fitContent">p95</Th>
            <Th modifier="fitContent">5xx/s</Th>
            <Th modifier="fitContent">In flight</Th>
          </Tr>
        </Thead>
        <Tbody>
          {latest.models.map((m) => (
            <Tr key={m.model}>
              <Td dataLabel="Model" modifier="breakWord">
                {m.model}
              </Td>
              <Td dataLabel="req/s">{formatNumber(m.requestsPerSecond)}</Td>
              <Td dataLabel="p50">{ms(m.p50)}</Td>
              <Td dataLabel="p95">{ms(m.p95)}</Td>
              <Td dataLabel="5xx/s">{formatNumber(m.errorsPerSecond)}</Td>
              <Td dataLabel="In flight">{m.inFlight}</Td>
            </Tr>
          ))}
        </Tbody>
      </Table>
    </>
  );
}
