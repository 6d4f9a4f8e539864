import { jsx as _jsx } from "react/jsx-runtime";
// @vitest-environment happy-dom
import { cleanup, render, screen } from '@testing-library/react';
import { MemoryRouter } from 'react-router';
import { afterEach, describe, expect, it } from 'vitest';
import { instanceOf } from '../lib/clusterFixture';
import { InstanceTable } from './InstanceTable';
afterEach(cleanup);
const instances = [{ ...instanceOf('i-1', 'local-model'), podId: null }, { ...instanceOf('i-2', 'remote-model'), podId: 'pod-b' }];
describe('InstanceTable', () => {
    it('has a Pod column in cluster mode', () => {
        render(_jsx(MemoryRouter, { children: _jsx(InstanceTable, { instances: instances, podOf: (i) => i.podId ?? 'pod-a' }) }));
        expect(screen.getByRole('columnheader', { name: 'Pod' })).toBeTruthy();
        const pods = Array.from(document.querySelectorAll('td[data-pod-id]')).map((td) => td.textContent);
        expect(pods).toEqual(['pod-a', 'pod-b']);
    });
    it('has none on a single node', () => {
        render(_jsx(MemoryRouter, { children: _jsx(InstanceTable, { instances: instances }) }));
        expect(screen.queryByRole('columnheader', { name: 'Pod' })).toBeNull();
        expect(document.querySelectorAll('td[data-pod-id]')).toHaveLength(0);
    });
});
