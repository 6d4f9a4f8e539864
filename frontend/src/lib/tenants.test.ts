import { describe, expect, it } from 'vitest';
import type { Tenant, TenantUsageReport, UsageBucket } from '../api/tenants';
import { formatCount, limitUses, severityOf, tokenSeries, totals, usagePath } from './tenants';

const bucket = (start: string, extra: Partial<UsageBucket> = {}): UsageBucket => ({
  start,
  end: start,
  tenant: 'team-a',
  key: null,
  model: null,
  requests: 0,
  failedRequests: 0,
  promptTokens: 0,
  completionTokens: 0,
  totalTokens: 0,
  estimatedRequests: 0,
  rejectedRequests: 0,
  rejected: {},
  ...extra,
});

const tenant: Tenant = {
  name: 'team-a',
  source: 'api',
  api_keys: ['k1'],
  subjects: [],
  groups: [],
  limits: { requests_per_minute: 10, tokens_per_minute: 1000, concurrent_requests: 4, tokens_per_day: null, tokens_per_month: 5000 },
  models: {},
  usage: { '*': { concurrent_requests: 4, tokens_today: null, tokens_this_month: 4100 } },
};

describe('usagePath', () => {
  it('asks per tenant, one step a point, ending with the step in progress', () => {
    const now = Date.parse('2026-12-04T10:20:30Z');
    const t = now / 1000;
    expect(usagePath('hour', now)).toBe(`/api/v1/usage?from=${t - 30 + 60 - 3600}&to=${t - 30 + 60}&step=60&group_by=tenant`);
    const day = usagePath('day', now);
    expect(day).toContain('step=1800');
    expect(day).toContain(`to=${Date.parse('2026-12-04T10:30:00Z') / 1000}`);
  });

  it('asks the last full minute for the per-minute limits', () => {
    const now = Date.parse('2026-12-04T10:20:30Z');
    const end = Date.parse('2026-12-04T10:20:00Z') / 1000;
    expect(usagePath('minute', now)).toBe(`/api/v1/usage?from=${end - 60}&to=${end}&step=60&group_by=tenant`);
  });
});

describe('limitUses', () => {
  it('sets each limit beside its current use, skipping absent limits', () => {
    const uses = limitUses(tenant, bucket('2026-12-04T10:19:00Z', { requests: 9, totalTokens: 1200 }));
    expect(uses.map((u) => [u.limit, u.used, u.max, u.severity])).toEqual([
      ['requests_per_minute', 9, 10, 'warning'],
      ['tokens_per_minute', 1200, 1000, 'danger'],
      ['concurrent_requests', 4, 4, 'danger'],
      ['tokens_per_month', 4100, 5000, 'warning'],
    ]);
    expect(uses[1]?.percent).toBe(100); // capped
  });

  it('reads no last minute as nothing used', () => {
    const uses = limitUses(tenant, undefined);
    expect(uses[0]?.used).toBe(0);
    expect(uses[0]?.severity).toBe('ok');
  });

  it('grades severity', () => {
    expect(severityOf(79, 100)).toBe('ok');
    expect(severityOf(80, 100)).toBe('warning');
    expect(severityOf(100, 100)).toBe('danger');
  });
});

describe('tokenSeries and totals', () => {
  const report: TenantUsageReport = {
    start: '2026-12-04T10:00:00Z',
    end: '2026-12-04T10:03:00Z',
    step: 60,
    groupBy: ['tenant'],
    pods: [],
    missingPods: [],
    buckets: [
      bucket('2026-12-04T10:01:00Z', { requests: 2, promptTokens: 10, completionTokens: 5, rejectedRequests: 1, rejected: { tokens_per_day: 1 } }),
      bucket('2026-12-04T10:02:00Z', { requests: 1, promptTokens: 3, completionTokens: 1 }),
      { ...bucket('2026-12-04T10:02:00Z', { requests: 7, promptTokens: 70 }), tenant: 'other' },
    ],
  };

  it('puts a point at every step, zero where the tenant had no bucket', () => {
    const data = tokenSeries(report, 'team-a');
    const t0 = Date.parse(report.start) / 1000;
    expect(data.xs).toEqual([t0, t0 + 60, t0 + 120]);
    expect(data.series.map((s) => s.values)).toEqual([
      [0, 10, 3],
      [0, 5, 1],
    ]);
  });

  it('has no series without a step', () => {
    expect(tokenSeries({ ...report, step: null }, 'team-a').xs).toEqual([]);
  });

  it('sums a tenant over the range, refusals by reason', () => {
    const t = totals(report.buckets.filter((b) => b.tenant === 'team-a'));
    expect(t).toMatchObject({ requests: 3, promptTokens: 13, completionTokens: 6, rejectedRequests: 1, rejected: { tokens_per_day: 1 } });
  });
});

describe('formatCount', () => {
  it('reads like the CLI', () => {
    expect(formatCount(950)).toBe('950');
    expect(formatCount(12_500)).toBe('12.5k');
    expect(formatCount(3_000_000)).toBe('3M');
    expect(formatCount(null)).toBe('—');
  });
});
