// @vitest-environment happy-dom
import { cleanup, fireEvent, render, screen, within } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { staticCluster } from '../lib/clusterFixture';
import { ClusterOverview } from './ClusterOverview';
import { NodeModelPane } from './NodeModelPane';
import { PodSelector } from './PodSelector';

afterEach(cleanup);

const rows = () => screen.getAllByRole('row').filter((r) => r.getAttribute('data-pod-id'));

describe('ClusterOverview', () => {
  it('shows mode, leader, term, quorum and every pod, the leader first', () => {
    render(<ClusterOverview status={staticCluster()} />);
    expect(screen.getByTestId('cluster-mode').textContent).toBe('static');
    expect(screen.getByTestId('cluster-leader').textContent).toBe('pod-a');
    expect(screen.getByTestId('cluster-term').textContent).toBe('3');
    expect(screen.getByText('2 of 3 pods')).toBeTruthy();
    expect(rows().map((r) => [r.dataset.podId, r.dataset.state, r.dataset.leader])).toEqual([
      ['pod-a', 'healthy', 'true'],
      ['pod-b', 'healthy', 'false'],
      ['pod-c', 'unavailable', 'false'],
    ]);
    const [a, b, c] = rows();
    expect(within(a!).getByText('leader')).toBeTruthy();
    expect(a!.querySelector('[data-gpu-index="1"]')?.textContent).toBe('GPU 1 Tesla T4: 2 GiB / 16 GiB');
    expect(within(a!).getByText('0.4 s ago')).toBeTruthy();
    expect(within(b!).getByText('this pod')).toBeTruthy();
    expect(within(b!).getByText('now')).toBeTruthy();
    // A simulated GPU says so (issue 25); a real one (pod-a's T4 above) carries no label.
    expect(b!.querySelector('[data-gpu-index="0"]')?.textContent).toBe('GPU 0 NVIDIA L4: 6 GiB / 24 GiB simulated');
    expect(within(c!).getByText('unavailable').closest('.pf-v6-c-label')?.className).toContain('pf-m-red');
    expect(within(c!).getByText('no GPU')).toBeTruthy();
    expect(within(c!).getByText('31.2 s ago')).toBeTruthy();
  });

  it('says plainly when there is no leader', () => {
    render(<ClusterOverview status={{ ...staticCluster(), leader: null, pods: staticCluster().pods.map((p) => ({ ...p, isLeader: false })) }} />);
    expect(screen.getByTestId('cluster-leader').textContent).toContain('none: election under way, or no quorum');
    expect(rows().every((r) => r.dataset.leader === 'false')).toBe(true);
  });
});

describe('NodeModelPane', () => {
  it("lists a pod's instances with their status and its GPU total", () => {
    const pod = staticCluster().pods[0]!;
    render(<NodeModelPane pod={pod} />);
    const pane = screen.getByTestId('node-pane-pod-b');
    expect(pane.dataset.state).toBe('healthy');
    expect(pane.textContent).toContain('127.0.0.2:3000 · 1 GPU: 6 GiB of 24 GiB used');
    const instances = within(pane)
      .getAllByRole('row')
      .filter((r) => r.dataset.instanceId)
      .map((r) => [r.dataset.instanceId, r.dataset.status]);
    expect(instances).toEqual([
      ['i-b1', 'active'],
      ['i-b2', 'sleeping'],
    ]);
    expect(within(pane).getByText('llama-b')).toBeTruthy();
  });

  it('says when a pod runs nothing, and marks the leader', () => {
    render(<NodeModelPane pod={staticCluster().pods[1]!} />);
    const pane = screen.getByTestId('node-pane-pod-a');
    expect(within(pane).getByText('No instances on this pod.')).toBeTruthy();
    expect(within(pane).getByText('leader')).toBeTruthy();
    expect(pane.textContent).toContain('2 GPUs: 2 GiB of 40 GiB used');
  });
});

describe('PodSelector', () => {
  it('offers "any" then every pod, unavailable ones disabled, and reports the choice', () => {
    const onChange = vi.fn();
    render(<PodSelector status={staticCluster()} value="" onChange={onChange} />);
    const select = screen.getByLabelText('Pod') as HTMLSelectElement;
    const options = Array.from(select.options).map((o) => [o.value, o.textContent, o.disabled]);
    expect(options).toEqual([
      ['', 'Any (scheduler)', false],
      ['pod-a', 'pod-a (leader) · healthy', false],
      ['pod-b', 'pod-b · healthy', false],
      ['pod-c', 'pod-c · unavailable', true],
    ]);
    fireEvent.change(select, { target: { value: 'pod-b' } });
    expect(onChange).toHaveBeenCalledWith('pod-b');
  });
});
