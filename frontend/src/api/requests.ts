// The request log and usage (GET /api/v1/requests, /api/v1/usage): types and hooks.

import { useQuery } from '@tanstack/react-query';
import { requestsPath, type RequestFilters } from '../lib/requests';
import { api } from './client';

export interface RequestEntry {
  id: number;
  requestId: string;
  at: string;
  model: string;
  instanceId: string | null;
  pod: string | null;
  status: number;
  latencyMs: number;
  ttftMs: number | null;
  stream: boolean;
  keyId: string | null;
  promptTokens: number | null;
  completionTokens: number | null;
}

export interface UsageRow {
  keyId: string;
  model: string;
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

export interface UsageReport {
  since: string;
  rows: UsageRow[];
  byKey: UsageRow[];
  byModel: UsageRow[];
}

export const LIVE_MS = 2000;

export function useRequests(filters: RequestFilters, live: boolean) {
  return useQuery({
    queryKey: ['requests', filters],
    queryFn: () => api<RequestEntry[]>(requestsPath(filters)),
    refetchInterval: live ? LIVE_MS : false,
  });
}

export function useUsage(live: boolean) {
  return useQuery({
    queryKey: ['usage'],
    queryFn: () => api<UsageReport>('/api/v1/usage'),
    refetchInterval: live ? LIVE_MS : false,
  });
}
