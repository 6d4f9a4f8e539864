// Tenants and their billable usage (GET /api/v1/tenants, /api/v1/usage with a question).

import { useQuery } from '@tanstack/react-query';
import { usagePath, type UsageRange } from '../lib/tenants';
import { api } from './client';

export interface TenantLimits {
  requests_per_minute: number | null;
  tokens_per_minute: number | null;
  concurrent_requests: number | null;
  tokens_per_day: number | null;
  tokens_per_month: number | null;
}

/** This node's current use of one scope ('*': the whole tenant, else a model). */
export interface ScopeUse {
  concurrent_requests: number;
  tokens_today: number | null;
  tokens_this_month: number | null;
}

export interface Tenant {
  name: string;
  source: 'config' | 'api';
  api_keys: string[];
  subjects: string[];
  groups: string[];
  limits: TenantLimits;
  models: Record<string, TenantLimits>;
  usage: Record<string, ScopeUse>;
}

export interface UsageBucket {
  start: string;
  end: string;
  tenant: string | null;
  key: string | null;
  model: string | null;
  requests: number;
  failedRequests: number;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  estimatedRequests: number;
  rejectedRequests: number;
  rejected: Record<string, number>;
}

export interface TenantUsageReport {
  start: string;
  end: string;
  step: number | null;
  groupBy: string[];
  buckets: UsageBucket[];
  pods: string[];
  missingPods: string[];
}

export const TENANTS_POLL_MS = 5000;

export function useTenants() {
  return useQuery({
    queryKey: ['tenants'],
    queryFn: () => api<Tenant[]>('/api/v1/tenants'),
    refetchInterval: TENANTS_POLL_MS,
  });
}

/** Per tenant over the range (one step per point), and the last full minute per tenant. */
export function useTenantUsage(range: UsageRange, now: number) {
  return useQuery({
    queryKey: ['tenant-usage', range, Math.floor(now / 60_000)],
    queryFn: () => api<TenantUsageReport>(usagePath(range, now)),
    refetchInterval: TENANTS_POLL_MS,
  });
}

export function useLastMinute(now: number) {
  return useQuery({
    queryKey: ['tenant-usage-minute', Math.floor(now / 10_000)],
    queryFn: () => api<TenantUsageReport>(usagePath('minute', now)),
    refetchInterval: TENANTS_POLL_MS,
  });
}
