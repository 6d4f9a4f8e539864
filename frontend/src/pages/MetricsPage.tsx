import { Alert, Card, CardBody, CardTitle, FormSelect, FormSelectOption, Gallery, PageSection } from '@patternfly/react-core';
import { useState } from 'react';
import { useClustered } from '../api/queries';
import { PageHeader } from '../components/PageHeader';
import { TimeSeriesChart } from '../components/TimeSeriesChart';
import { SAMPLE_SECONDS, useMetricsHistory, usePodHistory, WINDOW_SECONDS } from '../hooks/MetricsHistory';
import { gpuMemorySeries, latencyQuantileSeries, requestRateSeries } from '../lib/series';

export default function MetricsPage() {
  const cluster = useClustered();
  const [pod, setPod] = useState('');
  const everyPod = useMetricsHistory();
  const onePod = usePodHistory(cluster && pod ? pod : null);
  const { points, error } = cluster && pod ? onePod : everyPod;
  return (
    <>
      <PageHeader
        title="Metrics"
        description={`Sampled by the server every ${SAMPLE_SECONDS} s and kept for ${WINDOW_SECONDS / 60} minutes (/api/v1/metrics/history), so the charts survive a reload.${cluster ? ' Every pod together (each request once), or one pod.' : ''} Legends show the newest values; hover for a point in time.`}
      />
      {cluster && (
        <PageSection>
          <FormSelect
            id="charts-pod"
            aria-label="Pod"
            value={pod}
            onChange={(_e, v) => setPod(v)}
            style={{ maxWidth: '20rem' }}
          >
            <FormSelectOption value="" label="Every pod" />
            {cluster.pods.map((p) => (
              <FormSelectOption key={p.id} value={p.id} label={p.id} />
            ))}
          </FormSelect>
        </PageSection>
      )}
      {error && (
        <PageSection>
          <Alert isInline variant="warning" title={`Sampling failed: ${error.message}`}>
            The charts resume when the server answers again.
          </Alert>
        </PageSection>
      )}
      <PageSection>
        <Gallery hasGutter minWidths={{ default: '100%', xl: 'calc(50% - var(--pf-t--global--spacer--gutter--default))' }}>
          <Card>
            <CardTitle>GPU memory used</CardTitle>
            <CardBody>
              <TimeSeriesChart data={gpuMemorySeries(points)} unit="GiB" emptyText="No GPU samples yet" />
            </CardBody>
          </Card>
          <Card>
            <CardTitle>Requests per second</CardTitle>
            <CardBody>
              <TimeSeriesChart data={requestRateSeries(points)} unit="req/s" emptyText="No request rates yet" />
            </CardBody>
          </Card>
          <Card>
            <CardTitle>Latency p50 per model</CardTitle>
            <CardBody>
              <TimeSeriesChart data={latencyQuantileSeries(points, 'p50')} unit="ms" emptyText="No latency samples yet" />
            </CardBody>
          </Card>
          <Card>
            <CardTitle>Latency p95 per model</CardTitle>
            <CardBody>
              <TimeSeriesChart data={latencyQuantileSeries(points, 'p95')} unit="ms" emptyText="No latency samples yet" />
            </CardBody>
          </Card>
        </Gallery>
      </PageSection>
    </>
  );
}
