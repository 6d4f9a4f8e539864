import { Alert, Card, CardBody, CardTitle, Gallery, PageSection } from '@patternfly/react-core';
import { PageHeader } from '../components/PageHeader';
import { TimeSeriesChart } from '../components/TimeSeriesChart';
import { SAMPLE_SECONDS, useMetricsHistory } from '../hooks/MetricsHistory';
import { gpuMemorySeries, latencySeries, requestRateSeries } from '../lib/series';

export default function MetricsPage() {
  const { points, error } = useMetricsHistory();
  return (
    <>
      <PageHeader
        title="Metrics"
        description={`Sampled every ${SAMPLE_SECONDS} s from /api/v1/metrics and /api/v1/gpus while the dashboard is open (last 10 minutes).`}
      />
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
            <CardTitle>Latency p50 and p95 per model</CardTitle>
            <CardBody>
              <TimeSeriesChart data={latencySeries(points)} unit="ms" emptyText="No latency samples yet" />
            </CardBody>
          </Card>
        </Gallery>
      </PageSection>
    </>
  );
}
