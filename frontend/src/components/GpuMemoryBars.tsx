import { Content, Flex, FlexItem, Title } from '@patternfly/react-core';
import type { GpuReport, ModelInstance } from '../api/types';
import { formatBytes } from '../lib/format';
import { gpuBars, type BarSegment } from '../lib/gpuBars';
import { seriesColor } from '../lib/palette';
import { SimulatedLabel } from './StatusLabel';
import './GpuMemoryBars.css';

const OTHER_COLOR = 'var(--pf-t--global--color--nonstatus--gray--default, #8a8d90)';

function segmentColor(seg: BarSegment, order: Map<string, number>): string {
  if (seg.kind === 'free') return 'transparent';
  if (seg.kind === 'other') return OTHER_COLOR;
  return seriesColor(order.get(seg.key) ?? 0);
}

function tip(seg: BarSegment): string {
  const base = `${seg.label}: ${formatBytes(seg.bytes)}`;
  return seg.baselineBytes !== undefined ? `${base} (baseline ${formatBytes(seg.baselineBytes)})` : base;
}

/** Per-GPU memory: one stacked bar each, split by instance, other processes and free. */
export function GpuMemoryBars({ report, instances }: { report: GpuReport; instances: ModelInstance[] }) {
  const bars = gpuBars(report.gpus, report.budgets, instances);
  const order = new Map(instances.map((inst, i) => [inst.id, i]));
  return (
    <div className="sz-gpu-bars">
      {bars.map((bar) => (
        <section key={bar.index} className="sz-gpu-bar" data-gpu={bar.index} data-used-bytes={bar.usedBytes}>
          <Flex justifyContent={{ default: 'justifyContentSpaceBetween' }} alignItems={{ default: 'alignItemsCenter' }}>
            <FlexItem>
              <Title headingLevel="h3" size="md">
                GPU {bar.index} · {bar.name} {bar.simulated && <SimulatedLabel />}
              </Title>
            </FlexItem>
            <FlexItem>
              <Content component="small">
                {formatBytes(bar.usedBytes)} used of {formatBytes(bar.totalBytes)} · {formatBytes(bar.freeBytes)} free
                {bar.kvCacheTotalBytes !== null && <> · KV cache room {formatBytes(bar.kvCacheTotalBytes)}</>}
              </Content>
            </FlexItem>
          </Flex>
          <div
            className="sz-gpu-bar__track"
            role="img"
            aria-label={`GPU ${bar.index}: ${bar.segments.map(tip).join('; ')}`}
          >
            {bar.segments
              .filter((seg) => seg.kind !== 'free' && seg.fraction > 0)
              .map((seg) => (
                <div
                  key={seg.key}
                  className="sz-gpu-bar__segment"
                  title={tip(seg)}
                  data-segment={seg.kind}
                  data-instance-id={seg.instanceId}
                  data-bytes={seg.bytes}
                  style={{ width: `${(seg.fraction * 100).toFixed(2)}%`, background: segmentColor(seg, order) }}
                />
              ))}
          </div>
          <ul className="sz-gpu-bar__legend">
            {bar.segments.map((seg) => (
              <li key={seg.key}>
                <span className="sz-swatch" style={{ background: segmentColor(seg, order) }} />
                {tip(seg)}
              </li>
            ))}
          </ul>
        </section>
      ))}
    </div>
  );
}
