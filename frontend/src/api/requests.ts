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
  /** The pod that ran it (refused: the pod that answered). */
  pod: string | null;
  /** The pod the client sent it to (differs from `pod` when it was forwarded). */
  entryPod: string | null;
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

export interface RequestLogInfo {
  size: number;
  retention: boolean;
  maxRows: number | null;
  /** Pods with records here: more than one in a cluster. */
  pods: string[];
}

export const LIVE_MS = 2000;

export function useRequestLogInfo(live: boolean) {
  return useQuery({
    queryKey: ['requests-info'],
    queryFn: () => api<RequestLogInfo>('/api/v1/requests/info'),
    refetchInterval: live ? LIVE_MS * 5 : false,
  });
}

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
