import { Card, CardBody, CardTitle, Gallery, List, ListItem, PageSection } from '@patternfly/react-core';
import { useEngines, useGpus, useHealth } from '../api/queries';
import { useAuth } from '../auth/AuthContext';
import { EnginesCard } from '../components/EnginesCard';
import { PageHeader } from '../components/PageHeader';
import { SimulatedLabel } from '../components/StatusLabel';
import { Terms } from '../components/Terms';
import { formatBytes } from '../lib/format';

export default function AboutPage() {
  const health = useHealth();
  const gpus = useGpus();
  const engines = useEngines();
  const { config, me } = useAuth();
  const h = health.data;
  const g = gpus.data;
  return (
    <>
      <PageHeader title="About" description="This node: its version, mode, GPUs, engines and who you are to it." />
      <PageSection>
        <Gallery hasGutter minWidths={{ default: '100%', lg: '28rem' }}>
          <Card>
            <CardTitle>Server</CardTitle>
            <CardBody>
              <Terms
                items={[
                  ['Version', <span data-testid="version">{h?.version ?? '…'}</span>],
                  ['Mode', <span data-testid="mode">{h ? <ModeText mode={h.mode} /> : '…'}</span>],
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
          <EnginesCard engines={engines} />
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

function ModeText({ mode }: { mode: string }) {
  if (mode === 'demo') return <>demo <SimulatedLabel what="simulated GPUs and engines" /></>;
  if (mode === 'simulated') return <>simulated GPUs <SimulatedLabel what="simulated GPUs" /></>;
  return <>{mode}</>;
}
