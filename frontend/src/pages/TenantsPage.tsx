import {
  Alert,
  Card,
  CardBody,
  CardHeader,
  CardTitle,
  DescriptionList,
  DescriptionListDescription,
  DescriptionListGroup,
  DescriptionListTerm,
  Gallery,
  Label,
  LabelGroup,
  PageSection,
  Progress,
  ProgressMeasureLocation,
  ProgressVariant,
  ToggleGroup,
  ToggleGroupItem,
} from '@patternfly/react-core';
import { useState } from 'react';
import { isMissingRoute } from '../api/client';
import { useLastMinute, useTenants, useTenantUsage, type Tenant, type TenantUsageReport } from '../api/tenants';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { TimeSeriesChart } from '../components/TimeSeriesChart';
import { useNow } from '../hooks/useNow';
import { bucketsOf, formatCount, limitUses, RANGES, tokenSeries, totals, type LimitUse, type UsageRange } from '../lib/tenants';

const VARIANT: Record<LimitUse['severity'], ProgressVariant | undefined> = {
  ok: undefined,
  warning: ProgressVariant.warning,
  danger: ProgressVariant.danger,
};

function LimitBars({ uses }: { uses: LimitUse[] }) {
  if (uses.length === 0) return <p>No limits on the whole tenant.</p>;
  return (
    <>
      {uses.map((u) => (
        <Progress
          key={u.limit}
          title={u.label}
          value={u.percent}
          label={`${formatCount(u.used)} of ${formatCount(u.max)}`}
          valueText={`${u.used} of ${u.max}`}
          measureLocation={ProgressMeasureLocation.outside}
          variant={VARIANT[u.severity]}
          size="sm"
        />
      ))}
    </>
  );
}

function TenantCard({
  tenant,
  report,
  lastMinute,
  range,
}: {
  tenant: Tenant;
  report: TenantUsageReport | undefined;
  lastMinute: TenantUsageReport | undefined;
  range: UsageRange;
}) {
  const minute = bucketsOf(lastMinute, tenant.name)[0];
  const sum = totals(bucketsOf(report, tenant.name));
  const models = Object.keys(tenant.models);
  return (
    <Card isCompact data-tenant={tenant.name}>
      <CardHeader>
        <CardTitle>
          {tenant.name}{' '}
          <Label isCompact color={tenant.source === 'config' ? 'blue' : 'grey'}>
            {tenant.source === 'config' ? 'config file' : 'API'}
          </Label>
        </CardTitle>
      </CardHeader>
      <CardBody>
        <DescriptionList isCompact isHorizontal>
          <DescriptionListGroup>
            <DescriptionListTerm>API keys</DescriptionListTerm>
            <DescriptionListDescription>
              {tenant.api_keys.length > 0 ? (
                <LabelGroup>
                  {tenant.api_keys.map((k) => (
                    <Label key={k} isCompact className="sz-mono">
                      {k}
                    </Label>
                  ))}
                </LabelGroup>
              ) : (
                '—'
              )}
            </DescriptionListDescription>
          </DescriptionListGroup>
          {models.length > 0 && (
            <DescriptionListGroup>
              <DescriptionListTerm>Model limits</DescriptionListTerm>
              <DescriptionListDescription>{models.join(', ')}</DescriptionListDescription>
            </DescriptionListGroup>
          )}
          <DescriptionListGroup>
            <DescriptionListTerm>{RANGES[range].label}</DescriptionListTerm>
            <DescriptionListDescription data-testid="tenant-totals">
              {sum.requests} request{sum.requests === 1 ? '' : 's'} · {formatCount(sum.promptTokens)} prompt + {formatCount(sum.completionTokens)} completion tokens
              {sum.rejectedRequests > 0 && (
                <>
                  {' · '}
                  <span className="pf-v6-u-danger-color-100">
                    {sum.rejectedRequests} refused (
                    {Object.entries(sum.rejected)
                      .map(([reason, n]) => `${reason} ${n}`)
                      .join(', ')}
                    )
                  </span>
                </>
              )}
            </DescriptionListDescription>
          </DescriptionListGroup>
        </DescriptionList>
        <div className="pf-v6-u-my-md">
          <LimitBars uses={limitUses(tenant, minute)} />
        </div>
        <TimeSeriesChart
          data={tokenSeries(report, tenant.name)}
          unit="tokens"
          height={160}
          emptyText="No usage in this range yet."
        />
      </CardBody>
    </Card>
  );
}

export default function TenantsPage() {
  const [range, setRange] = useState<UsageRange>('hour');
  const now = useNow(10_000);
  const tenants = useTenants();
  const usage = useTenantUsage(range, now);
  const lastMinute = useLastMinute(now);
  const missing = usage.data?.missingPods ?? [];
  return (
    <>
      <PageHeader
        title="Tenants"
        description="Each tenant's limits, its use of them now, and the tokens it used over time (every pod's, in a cluster). The per-minute limits are shown against the last full minute."
        actions={
          <ToggleGroup aria-label="Time range">
            {(['hour', 'day', 'month'] as const).map((r) => (
              <ToggleGroupItem key={r} text={RANGES[r].label} isSelected={range === r} onChange={() => setRange(r)} />
            ))}
          </ToggleGroup>
        }
      />
      <PageSection>
        {missing.length > 0 && (
          <Alert isInline variant="warning" title={`No answer from ${missing.join(', ')}`} className="pf-v6-u-mb-md">
            Their usage is missing from the charts until they answer again.
          </Alert>
        )}
        {tenants.isPending ? (
          <Loading what="tenants" />
        ) : tenants.isError ? (
          isMissingRoute(tenants.error) ? (
            <Empty title="This server has no tenants">It predates tenants (docs/tenancy.md).</Empty>
          ) : (
            <ErrorState what="the tenants" error={tenants.error} onRetry={() => void tenants.refetch()} />
          )
        ) : tenants.data.length === 0 ? (
          <Empty title="No tenants">
            Define tenants in the config file (<code>tenants:</code>) or with <code>PUT /api/v1/tenants/NAME</code>; see docs/tenancy.md.
          </Empty>
        ) : (
          <Gallery hasGutter minWidths={{ default: '100%', xl: '560px' }}>
            {tenants.data.map((t) => (
              <TenantCard key={t.name} tenant={t} report={usage.data} lastMinute={lastMinute.data} range={range} />
            ))}
          </Gallery>
        )}
      </PageSection>
    </>
  );
}
