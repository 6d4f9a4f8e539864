// @vitest-environment happy-dom
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { cleanup, render, screen } from '@testing-library/react';
import type { ReactNode } from 'react';
import { MemoryRouter } from 'react-router';
import { afterEach, describe, expect, it } from 'vitest';
import { instanceOf } from '../lib/clusterFixture';
import { InstanceTable } from './InstanceTable';

afterEach(cleanup);

// The table reads the GPU report (what each instance holds now): a client with no server.
const withClient = (ui: ReactNode) => (
  <QueryClientProvider client={new QueryClient({ defaultOptions: { queries: { enabled: false } } })}>{ui}</QueryClientProvider>
);

const instances = [{ ...instanceOf('i-1', 'local-model'), podId: null }, { ...instanceOf('i-2', 'remote-model'), podId: 'pod-b' }];

describe('InstanceTable', () => {
  it('has a Pod column in cluster mode', () => {
    render(
      withClient(
        <MemoryRouter>
          <InstanceTable instances={instances} podOf={(i) => i.podId ?? 'pod-a'} />
        </MemoryRouter>,
      ),
    );
    expect(screen.getByRole('columnheader', { name: 'Pod' })).toBeTruthy();
    const pods = Array.from(document.querySelectorAll('td[data-pod-id]')).map((td) => td.textContent);
    expect(pods).toEqual(['pod-a', 'pod-b']);
  });

  it('has none on a single node', () => {
    render(
      withClient(
        <MemoryRouter>
          <InstanceTable instances={instances} />
        </MemoryRouter>,
      ),
    );
    expect(screen.queryByRole('columnheader', { name: 'Pod' })).toBeNull();
    expect(document.querySelectorAll('td[data-pod-id]')).toHaveLength(0);
  });
});
