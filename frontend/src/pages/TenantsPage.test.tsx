// @vitest-environment happy-dom
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { cleanup, render, screen, within } from '@testing-library/react';
import { MemoryRouter } from 'react-router';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Tenant, TenantUsageReport } from '../api/tenants';
import { AuthProvider } from '../auth/AuthContext';
import TenantsPage from './TenantsPage';

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const json = (body: unknown, status = 200): Response =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });

const TEAM: Tenant = {
  name: 'team-a',
  source: 'config',
  api_keys: ['k1', 'k2'],
  subjects: [],
  groups: [],
  limits: { requests_per_minute: null, tokens_per_minute: null, concurrent_requests: 4, tokens_per_day: 1000, tokens_per_month: null },
  models: {},
  usage: { '*': { concurrent_requests: 1, tokens_today: 900, tokens_this_month: null } },
};

function report(start: string, missingPods: string[]): TenantUsageReport {
  return {
    start,
    end: start,
    step: null, // no points: the chart says so instead of drawing (no canvas here)
    groupBy: ['tenant'],
    pods: ['pod-a', 'pod-b'],
    missingPods,
    buckets: [
      {
        start,
        end: start,
        tenant: 'team-a',
        key: null,
        model: null,
        requests: 12,
        failedRequests: 0,
        promptTokens: 3400,
        completionTokens: 120,
        totalTokens: 3520,
        estimatedRequests: 0,
        rejectedRequests: 2,
        rejected: { tokens_per_day: 2 },
      },
    ],
  };
}

function show(tenants: Tenant[], missingPods: string[] = []) {
  vi.stubGlobal(
    'fetch',
    vi.fn(async (path: string) => {
      if (path === '/api/v1/tenants') return json(tenants);
      if (path.startsWith('/api/v1/usage?')) return json(report('2026-12-04T10:00:00Z', missingPods));
      return json({ detail: 'Not Found', code: 'not_found' }, 404);
    }),
  );
  const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={qc}>
      <MemoryRouter>
        <AuthProvider>
          <TenantsPage />
        </AuthProvider>
      </MemoryRouter>
    </QueryClientProvider>,
  );
}

describe('TenantsPage', () => {
  it('shows each limit against its use, the totals and the refusals by limit', async () => {
    show([TEAM]);
    const totals = await screen.findByTestId('tenant-totals');
    expect(totals.textContent).toContain('12 requests · 3.4k prompt + 120 completion tokens');
    expect(totals.textContent).toContain('2 refused (tokens_per_day 2)');
    const today = screen.getByRole('progressbar', { name: 'Tokens today' });
    expect(today.getAttribute('aria-valuetext')).toBe('900 of 1000');
    expect(within(today.parentElement as HTMLElement).getByText('900 of 1k')).toBeTruthy();
    expect(screen.getByRole('progressbar', { name: 'Concurrent requests' }).getAttribute('aria-valuetext')).toBe('1 of 4');
    expect(screen.getByText('config file')).toBeTruthy();
  });

  it('names the pods whose usage is missing', async () => {
    show([TEAM], ['pod-b']);
    expect(await screen.findByText('No answer from pod-b')).toBeTruthy();
  });

  it('says how to define tenants when there are none', async () => {
    show([]);
    expect(await screen.findByText('No tenants')).toBeTruthy();
  });
});
