import {
  Card,
  CardBody,
  CardTitle,
  DescriptionList,
  DescriptionListDescription,
  DescriptionListGroup,
  DescriptionListTerm,
  Gallery,
  List,
  ListItem,
  PageSection,
} from '@patternfly/react-core';
import type { ReactNode } from 'react';
import { useGpus, useHealth } from '../api/queries';
import { useAuth } from '../auth/AuthContext';
import { PageHeader } from '../components/PageHeader';
import { SimulatedLabel } from '../components/StatusLabel';
import { formatBytes } from '../lib/format';

function Terms({ items }: { items: Array<[string, ReactNode]> }) {
  return (
    <DescriptionList isHorizontal isCompact>
      {items.map(([term, value]) => (
        <DescriptionListGroup key={term}>
          <DescriptionListTerm>{term}</DescriptionListTerm>
          <DescriptionListDescription>{value}</DescriptionListDescription>
        </DescriptionListGroup>
      ))}
    </DescriptionList>
  );
}

export default function AboutPage() {
  const health = useHealth();
  const gpus = useGpus();
  const { config, me } = useAuth();
  const h = health.data;
  const g = gpus.data;
  return (
    <>
      <PageHeader title="About" description="This node: its version, mode, GPUs and who you are to it." />
      <PageSection>
        <Gallery hasGutter minWidths={{ default: '100%', lg: '28rem' }}>
          <Card>
            <CardTitle>Server</CardTitle>
            <CardBody>
              <Terms
                items={[
                  ['Version', <span data-testid="version">{h?.version ?? '…'}</span>],
                  ['Mode', h ? (h.mode === 'demo' ? <>demo <SimulatedLabel what="simulated GPUs and engines" /></> : h.mode) : '…'],
                  ['Status', h?.status ?? '…'],
                  ['API', <a href="/docs">OpenAPI docs (/docs)</a>],
                  ['Metrics', <a href="/metrics">Prometheus (/metrics)</a>],
                ]}
              />
            </CardBody>
          </Card>
          <Card>
            <CardTitle>GPUs</CardTitle>
            <CardBody>
              {!g && '…'}
              {g && !g.available && <>None: {g.reason ?? 'no NVIDIA driver'}. Engines run on the CPU.</>}
              {g?.available && (
                <List isPlain>
                  {g.gpus.map((gpu) => (
                    <ListItem key={gpu.index}>
                      GPU {gpu.index}: {gpu.name}, {formatBytes(gpu.totalBytes)}
                      {gpu.computeCapability && `, compute ${gpu.computeCapability.join('.')}`}{' '}
                      {gpu.simulated && <SimulatedLabel />}
                    </ListItem>
                  ))}
                </List>
              )}
            </CardBody>
          </Card>
          <Card>
            <CardTitle>Authentication</CardTitle>
            <CardBody>
              <Terms
                items={[
                  ['Admin auth', config.authEnabled ? 'on (JWT bearer tokens)' : 'off: the server listens on loopback only, every caller is admin'],
                  ['OIDC issuer', config.oidc?.issuer ?? '—'],
                  ['You', me ? `${me.subject} (${me.role ?? 'no role'})` : '—'],
                ]}
              />
            </CardBody>
          </Card>
        </Gallery>
      </PageSection>
    </>
  );
}
