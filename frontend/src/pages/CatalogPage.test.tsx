// @vitest-environment happy-dom
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { cleanup, fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { MemoryRouter } from 'react-router';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { AdapterView } from '../api/adapters';
import type { CatalogModel } from '../api/catalog';
import { AuthProvider } from '../auth/AuthContext';
import CatalogPage from './CatalogPage';

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const json = (body: unknown, status = 200): Response =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });

const row = (name: string, entry: CatalogModel['entry']): CatalogModel => ({
  name,
  source: 'api',
  state: 'unloaded',
  error: null,
  overridesConfig: false,
  instanceIds: [],
  entry,
  idleSeconds: null,
});

// As GET /api/v1/catalog lists them: the adapter's modelPath is "" (it runs in its base).
const CATALOG: CatalogModel[] = [
  row('llama', { modelPath: 'meta-llama/Llama-3.1-8B', engine: 'sim', loraSlots: 4, maxLoraRank: 32, adapterOf: null, adapterPath: null }),
  row('sql-helper', { modelPath: '', engine: null, aliases: ['sql'], loraSlots: null, adapterOf: 'llama', adapterPath: '/models/adapters/sql' }),
];

const ADAPTERS: AdapterView[] = [
  {
    name: 'sql-helper',
    base: 'llama',
    adapterPath: '/models/adapters/sql',
    aliases: ['sql'],
    state: 'active',
    loadedOn: [{ podId: null, instanceId: '3f2a9c1d0b7e', inFlight: 0, sleeping: false }],
  },
];

// An adapter entry of the config file that does not validate: no entry, its reason.
const BIG: CatalogModel = {
  ...row('big', null),
  source: 'config',
  state: 'invalid',
  error: "catalog entry 'big': adapterPath: the adapter's rank 64 is greater than the base's maxLoraRank 32",
};

function serve(): Array<{ path: string; method: string; body: unknown }> {
  const calls: Array<{ path: string; method: string; body: unknown }> = [];
  vi.stubGlobal(
    'fetch',
    vi.fn(async (path: string, init: RequestInit = {}) => {
      const body = init.body ? JSON.parse(init.body as string) : null;
      calls.push({ path, method: init.method ?? 'GET', body });
      if (path === '/api/v1/catalog') return json([...CATALOG, BIG]);
      if (path === '/api/v1/adapters') return json(ADAPTERS);
      if (path === '/api/v1/adapters/sql-helper/unload')
        return json({ detail: "LoRA adapter 'sql-helper' serves 2 requests", code: 'adapter_in_use' }, 409);
      if (path === '/api/v1/catalog/sql-helper' && init.method === 'PUT') return json(row('sql-helper', body));
      return json({ detail: 'Not Found', code: 'not_found' }, 404);
    }),
  );
  return calls;
}

function show() {
  const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={qc}>
      <MemoryRouter>
        <AuthProvider>
          <CatalogPage />
        </AuthProvider>
      </MemoryRouter>
    </QueryClientProvider>,
  );
}

const modelCell = (name: string): string => {
  const tr = document.querySelector(`tr[data-catalog-name="${name}"]`);
  if (!(tr instanceof HTMLElement)) throw new Error(`no row for ${name}`);
  return within(tr).getByText((_t, el) => el?.getAttribute('data-label') === 'Model').textContent ?? '';
};

describe('CatalogPage', () => {
  it('shows a LoRA adapter as an adapter of its base, and saves it as one', async () => {
    const calls = serve();
    show();
    await screen.findByText('sql-helper');
    expect(modelCell('sql-helper')).toBe('adapter of llama · /models/adapters/sql');
    expect(modelCell('llama')).toBe('meta-llama/Llama-3.1-8B · sim · 4 LoRA slots');

    const adapterRow = document.querySelector('tr[data-catalog-name="sql-helper"]') as HTMLElement;
    fireEvent.click(within(adapterRow).getByRole('button', { name: 'Edit' }));
    const dialog = await screen.findByRole('dialog');
    expect((within(dialog).getByLabelText(/Adapter of/) as HTMLInputElement).value).toBe('llama');
    fireEvent.click(within(dialog).getByRole('button', { name: 'Save' }));
    await waitFor(() => expect(calls.some((c) => c.method === 'PUT')).toBe(true));
    const put = calls.find((c) => c.method === 'PUT');
    expect(put?.path).toBe('/api/v1/catalog/sql-helper');
    expect(put?.body).toEqual({ adapterOf: 'llama', adapterPath: '/models/adapters/sql', aliases: ['sql'] });
  });

  it('lists the adapters under their base, the invalid one with its reason, and shows a refused unload', async () => {
    const calls = serve();
    show();
    await screen.findByText('LoRA adapters');
    const table = await waitFor(() => {
      const t = document.querySelector('table[aria-label="LoRA adapters"]');
      if (!(t instanceof HTMLElement)) throw new Error('no adapters table yet');
      return t;
    });
    const sql = table.querySelector('tr[data-adapter-name="sql-helper"]') as HTMLElement;
    expect(sql.getAttribute('data-state')).toBe('active');
    expect(within(sql).getByRole('link', { name: '3f2a9c1d0b7e' }).getAttribute('href')).toBe('/models/3f2a9c1d0b7e');
    expect((within(sql).getByRole('button', { name: 'Load sql-helper' }) as HTMLButtonElement).disabled).toBe(true);
    const big = table.querySelector('tr[data-adapter-name="big"]') as HTMLElement;
    expect(big.getAttribute('data-state')).toBe('invalid');
    expect(big.textContent).toContain('rank 64 is greater');

    fireEvent.click(within(sql).getByRole('button', { name: 'Unload sql-helper' }));
    const alert = await screen.findByTestId('adapter-error');
    expect(alert.textContent).toContain('sql-helper serves requests now: nothing was unloaded');
    expect(calls.filter((c) => c.method === 'POST').map((c) => c.path)).toEqual(['/api/v1/adapters/sql-helper/unload']);
  });
});
