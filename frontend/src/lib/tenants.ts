// The Tenants page's logic: the usage question, current use against each limit, chart series.

import type { ChartData } from './series';
import type { Tenant, TenantUsageReport, UsageBucket } from '../api/tenants';

export type UsageRange = 'minute' | 'hour' | 'day' | 'month';

/** Each range's span and step (seconds): at most 60 points a chart. */
export const RANGES: Record<UsageRange, { label: string; span: number; step: number }> = {
  minute: { label: 'Last minute', span: 60, step: 60 },
  hour: { label: 'Last hour', span: 3600, step: 60 },
  day: { label: 'Last 24 hours', span: 86_400, step: 1800 },
  month: { label: 'Last 30 days', span: 30 * 86_400, step: 86_400 },
};

/**
 * The question for a range ending now: per tenant, one bucket per step. `to` is the
 * end of the current step, so the step in progress is the last point. The 'minute'
 * range is the last *full* minute: the rate the per-minute limits are held to.
 */
export function usagePath(range: UsageRange, nowMs: number): string {
  const { span, step } = RANGES[range];
  const now = Math.floor(nowMs / 1000);
  const to = range === 'minute' ? Math.floor(now / 60) * 60 : Math.ceil((now + 1) / step) * step;
  const from = to - span;
  return `/api/v1/usage?from=${from}&to=${to}&step=${step}&group_by=tenant`;
}

export interface LimitUse {
  /** The limit's field name, e.g. tokens_per_day. */
  limit: string;
  label: string;
  used: number;
  max: number;
  /** 0..100, capped: what a progress bar shows. */
  percent: number;
  severity: 'ok' | 'warning' | 'danger';
}

const LABELS: Record<string, string> = {
  requests_per_minute: 'Requests per minute',
  tokens_per_minute: 'Tokens per minute',
  concurrent_requests: 'Concurrent requests',
  tokens_per_day: 'Tokens today',
  tokens_per_month: 'Tokens this month',
};

export function severityOf(used: number, max: number): LimitUse['severity'] {
  if (used >= max) return 'danger';
  if (used >= 0.8 * max) return 'warning';
  return 'ok';
}

/**
 * Each limit of the tenant's whole traffic beside its current use: in flight and the
 * budgets from the tenant's own counters; the per-minute limits against the last full
 * minute's usage (`lastMinute`: the bucket of that minute for this tenant, if any).
 */
export function limitUses(tenant: Tenant, lastMinute: UsageBucket | undefined): LimitUse[] {
  const scope = tenant.usage['*'];
  const used: Record<string, number> = {
    requests_per_minute: lastMinute ? lastMinute.requests : 0,
    tokens_per_minute: lastMinute ? lastMinute.totalTokens : 0,
    concurrent_requests: scope?.concurrent_requests ?? 0,
    tokens_per_day: scope?.tokens_today ?? 0,
    tokens_per_month: scope?.tokens_this_month ?? 0,
  };
  const out: LimitUse[] = [];
  for (const [limit, label] of Object.entries(LABELS)) {
    const max = tenant.limits[limit as keyof Tenant['limits']];
    if (max == null) continue;
    const u = used[limit] ?? 0;
    out.push({ limit, label, used: u, max, percent: Math.min(100, (100 * u) / max), severity: severityOf(u, max) });
  }
  return out;
}

/** A tenant's buckets of a report (grouped by tenant). */
export function bucketsOf(report: TenantUsageReport | undefined, tenant: string): UsageBucket[] {
  return report ? report.buckets.filter((b) => b.tenant === tenant) : [];
}

export interface Totals {
  requests: number;
  promptTokens: number;
  completionTokens: number;
  rejectedRequests: number;
  rejected: Record<string, number>;
  estimatedRequests: number;
}

export function totals(buckets: UsageBucket[]): Totals {
  const t: Totals = { requests: 0, promptTokens: 0, completionTokens: 0, rejectedRequests: 0, rejected: {}, estimatedRequests: 0 };
  for (const b of buckets) {
    t.requests += b.requests;
    t.promptTokens += b.promptTokens;
    t.completionTokens += b.completionTokens;
    t.rejectedRequests += b.rejectedRequests;
    t.estimatedRequests += b.estimatedRequests;
    for (const [reason, n] of Object.entries(b.rejected)) t.rejected[reason] = (t.rejected[reason] ?? 0) + n;
  }
  return t;
}

/**
 * Tokens per step over the whole range: a point at every step (0 where the tenant had no
 * bucket: the server lists only buckets with something in them), prompt and completion.
 */
export function tokenSeries(report: TenantUsageReport | undefined, tenant: string): ChartData {
  if (!report || report.step == null) return { xs: [], series: [] };
  const start = Date.parse(report.start) / 1000;
  const end = Date.parse(report.end) / 1000;
  const step = report.step;
  const byStart = new Map(bucketsOf(report, tenant).map((b) => [Date.parse(b.start) / 1000, b]));
  const xs: number[] = [];
  const prompt: number[] = [];
  const completion: number[] = [];
  for (let t = start; t < end; t += step) {
    const b = byStart.get(t);
    xs.push(t);
    prompt.push(b?.promptTokens ?? 0);
    completion.push(b?.completionTokens ?? 0);
  }
  return {
    xs,
    series: [
      { label: 'prompt tokens', values: prompt },
      { label: 'completion tokens', values: completion },
    ],
  };
}

/** 1234567 -> "1.2M": counts at a glance (the CLI's form). */
export function formatCount(n: number | null | undefined): string {
  if (n == null) return '—';
  for (const [size, unit] of [
    [1e9, 'G'],
    [1e6, 'M'],
    [1e3, 'k'],
  ] as const) {
    if (Math.abs(n) >= size) return `${(n / size).toFixed(1).replace(/\.0$/, '')}${unit}`;
  }
  return String(n);
}
