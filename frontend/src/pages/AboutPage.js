import { jsx as _jsx, Fragment as _Fragment, jsxs as _jsxs } from "react/jsx-runtime";
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
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "About", description: "This node: its version, mode, GPUs, engines and who you are to it." }), _jsx(PageSection, { children: _jsxs(Gallery, { hasGutter: true, minWidths: { default: '100%', lg: '28rem' }, children: [_jsxs(Card, { children: [_jsx(CardTitle, { children: "Server" }), _jsx(CardBody, { children: _jsx(Terms, { items: [
                                            ['Version', _jsx("span", { "data-testid": "version", children: h?.version ?? '…' })],
                                            ['Mode', h ? (h.mode === 'demo' ? _jsxs(_Fragment, { children: ["demo ", _jsx(SimulatedLabel, { what: "simulated GPUs and engines" })] }) : h.mode) : '…'],
                                            ['Status', h?.status ?? '…'],
                                            ['API', _jsx("a", { href: "/docs", children: "OpenAPI docs (/docs)" })],
                                            ['Metrics', _jsx("a", { href: "/metrics", children: "Prometheus (/metrics)" })],
                                        ] }) })] }), _jsxs(Card, { children: [_jsx(CardTitle, { children: "GPUs" }), _jsxs(CardBody, { children: [!g && '…', g && !g.available && _jsxs(_Fragment, { children: ["None: ", g.reason ?? 'no NVIDIA driver', ". Engines run on the CPU."] }), g?.available && (_jsx(List, { isPlain: true, children: g.gpus.map((gpu) => (_jsxs(ListItem, { children: ["GPU ", gpu.index, ": ", gpu.name, ", ", formatBytes(gpu.totalBytes), gpu.computeCapability && `, compute ${gpu.computeCapability.join('.')}`, ' ', gpu.simulated && _jsx(SimulatedLabel, {})] }, gpu.index))) }))] })] }), _jsx(EnginesCard, { engines: engines }), _jsxs(Card, { children: [_jsx(CardTitle, { children: "Authentication" }), _jsx(CardBody, { children: _jsx(Terms, { items: [
                                            ['Admin auth', config.authEnabled ? 'on (JWT bearer tokens)' : 'off: the server listens on loopback only, every caller is admin'],
                                            ['OIDC issuer', config.oidc?.issuer ?? '—'],
                                            ['You', me ? `${me.subject} (${me.role ?? 'no role'})` : '—'],
                                        ] }) })] })] }) })] }));
}
