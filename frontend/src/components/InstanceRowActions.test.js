import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
// @vitest-environment happy-dom
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { cleanup, fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AuthProvider } from '../auth/AuthContext';
import { instanceOf } from '../lib/clusterFixture';
import { InstanceRowActions } from './InstanceRowActions';
import { MoveDialogHost } from './MoveAction';
import { NotificationProvider } from './Notifications';
afterEach(() => {
    cleanup();
    vi.unstubAllGlobals();
    sessionStorage.clear();
});
const json = (body, status = 200) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
const single = { mode: 'single', podId: 'node', leader: 'node', term: 0, pods: [], moves: [] };
/** A single node (its own leader); `role` null: auth off, everyone is admin. */
function serve(role) {
    vi.stubGlobal('fetch', vi.fn(async (path) => {
        if (path === '/api/auth/config')
            return json({ authEnabled: role !== null, oidc: null });
        if (path === '/api/auth/me')
            return json({ subject: 'someone', role, authEnabled: true });
        if (path === '/api/cluster/status')
            return json(single);
        return json({ detail: 'Not Found', code: 'not_found' }, 404);
    }));
    if (role !== null)
        sessionStorage.setItem('sardeenz.token', 'a-token');
}
function show(inst) {
    const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
    render(_jsx(QueryClientProvider, { client: qc, children: _jsx(AuthProvider, { children: _jsxs(NotificationProvider, { children: [_jsx(InstanceRowActions, { inst: inst }), _jsx(MoveDialogHost, {})] }) }) }));
}
const menuItem = (name) => screen.getByRole('menuitem', { name: new RegExp(`^${name}`) });
async function openMenu(name) {
    fireEvent.click(await screen.findByRole('button', { name: `Actions for ${name}` }));
    await screen.findByRole('menu');
}
describe('InstanceRowActions', () => {
    it('puts sleep, unload and move in the kebab, each opening its confirmation', async () => {
        serve(null);
        const inst = { ...instanceOf('i-1', 'llama'), sleepModeEnabled: true };
        show(inst);
        await waitFor(() => expect(screen.getByRole('button', { name: 'Actions for llama' })).toBeTruthy());
        expect(screen.queryByRole('menuitem')).toBeNull(); // closed until asked
        await openMenu('llama');
        await waitFor(() => expect(screen.getAllByRole('menuitem').map((m) => m.textContent)).toEqual(['Sleep', 'Unload', 'Move']));
        fireEvent.click(menuItem('Sleep'));
        const dialog = await screen.findByRole('dialog');
        expect(within(dialog).getByText('Put llama to sleep?')).toBeTruthy();
        expect(within(dialog).getByRole('button', { name: 'Sleep (level 1)' })).toBeTruthy();
        fireEvent.click(within(dialog).getByRole('button', { name: 'Cancel' }));
        await waitFor(() => expect(screen.queryByRole('dialog')).toBeNull());
        await openMenu('llama');
        fireEvent.click(menuItem('Unload'));
        expect(within(await screen.findByRole('dialog')).getByText('Unload llama?')).toBeTruthy();
    });
    it('opens the move dialog outside the row', async () => {
        serve(null);
        show(instanceOf('i-1', 'llama'));
        await openMenu('llama');
        await waitFor(() => expect(menuItem('Move')).toBeTruthy());
        fireEvent.click(menuItem('Move'));
        expect(await screen.findByRole('dialog')).toBeTruthy();
    });
    it('keeps a disabled action in the menu with its reason, and it does nothing', async () => {
        serve(null);
        show(instanceOf('i-1', 'llama', 'starting'));
        await openMenu('llama');
        const sleep = menuItem('Sleep');
        expect(sleep.getAttribute('aria-disabled')).toBe('true');
        expect(sleep.textContent).toContain('Loaded without sleep mode');
        fireEvent.click(sleep);
        await waitFor(() => expect(menuItem('Move').getAttribute('aria-disabled')).toBe('true'));
        expect(menuItem('Move').textContent).toContain('Only an active instance can move (this one is starting)');
        fireEvent.click(menuItem('Move'));
        expect(menuItem('Unload').getAttribute('aria-disabled')).toBeNull();
        expect(screen.queryByRole('dialog')).toBeNull();
    });
    it('a sleeping instance offers wake instead of sleep', async () => {
        serve(null);
        show({ ...instanceOf('i-1', 'llama', 'sleeping'), sleepModeEnabled: true, sleepLevel: 1 });
        await openMenu('llama');
        expect(menuItem('Wake')).toBeTruthy();
        expect(screen.queryByRole('menuitem', { name: /^Sleep/ })).toBeNull();
    });
    it('shows no kebab to a read-only user', async () => {
        serve('admin-readonly');
        show(instanceOf('i-1', 'llama'));
        await waitFor(() => expect(vi.mocked(fetch).mock.calls.some(([p]) => p === '/api/auth/me')).toBe(true));
        await new Promise((r) => setTimeout(r, 50));
        expect(screen.queryByRole('button', { name: /^Actions for/ })).toBeNull();
    });
});
