import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Alert, Card, CardBody, CardTitle, Flex, FlexItem, Gallery, PageSection, } from '@patternfly/react-core';
import { useNavigate, useParams } from 'react-router';
import { ApiError } from '../api/client';
import { useInstance, useInstanceMetrics } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { CreateProfileButton } from '../components/CreateProfileButton';
import { InstanceActions } from '../components/InstanceActions';
import { gpuText } from '../components/InstanceTable';
import { PageHeader } from '../components/PageHeader';
import { Terms } from '../components/Terms';
import { Empty, ErrorState, Loading } from '../components/States';
import { SimulatedLabel, StatusLabel } from '../components/StatusLabel';
import { formatBytes, formatDuration, formatGiB, formatNumber, formatTimestamp, formatUptime } from '../lib/format';
import { useNow } from '../hooks/useNow';
function MemoryCard({ inst }) {
    const m = inst.memoryMetrics;
    if (!m) {
        return _jsx(Empty, { title: "No memory figures yet", children: "They are read from the engine's log once it has loaded." });
    }
    return (_jsx(Terms, { items: [
            ['Weights', formatGiB(m.weightsMemoryGiB)],
            ['CUDA graphs', formatGiB(m.cudaGraphMemoryGiB)],
            ['KV cache available', formatGiB(m.kvCacheAvailableGiB)],
            ['KV cache per request', m.kvCachePerRequestMiB == null ? '—' : `${formatNumber(m.kvCachePerRequestMiB)} MiB`],
            ['KV cache tokens', formatNumber(m.kvCacheTokens)],
            ['Max model length', formatNumber(m.maxModelLen)],
            ['Max concurrency', m.maxConcurrency == null ? '—' : `${formatNumber(m.maxConcurrency)}×`],
            ['Weights load time', formatDuration(m.weightsLoadSeconds)],
            ['Engine init time', formatDuration(m.engineInitSeconds)],
        ] }));
}
function baselines(inst) {
    const entries = Object.entries(inst.memoryBaselineBytesByGpu ?? {});
    return entries.length === 0 ? '—' : entries.map(([gpu, b]) => `GPU ${gpu}: ${formatBytes(b)}`).join(', ');
}
export default function InstancePage() {
    const { id = '' } = useParams();
    const query = useInstance(id);
    const navigate = useNavigate();
    const canMutate = useCanMutate();
    const now = useNow();
    if (query.isPending)
        return _jsx(Loading, { what: "the instance" });
    if (query.isError) {
        if (query.error instanceof ApiError && query.error.status === 404) {
            return (_jsx(Empty, { title: `No instance ${id}`, actions: _jsx(ButtonLink, { to: "/models", children: "Back to Models" }), children: "It was unloaded, or the link is wrong." }));
        }
        return _jsx(ErrorState, { what: "the instance", error: query.error, onRetry: () => void query.refetch() });
    }
    const inst = query.data;
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: inst.servedModelName, description: _jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, children: [_jsx(FlexItem, { children: _jsx(StatusLabel, { status: inst.status, sleepLevel: inst.sleepLevel }) }), inst.simulated && (_jsx(FlexItem, { children: _jsx(SimulatedLabel, { what: "simulated engine" }) })), inst.displayName !== inst.servedModelName && _jsx(FlexItem, { children: inst.displayName })] }), actions: _jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, children: [_jsx(FlexItem, { children: _jsx(ButtonLink, { to: `/logs/${inst.id}`, variant: "secondary", size: "sm", children: "Logs" }) }), canMutate && inst.status === 'active' && inst.memoryMetrics && (_jsx(FlexItem, { children: _jsx(CreateProfileButton, { inst: inst }) })), _jsx(FlexItem, { children: _jsx(InstanceActions, { inst: inst, onUnloaded: () => void navigate('/models') }) })] }) }), inst.status === 'failed' && (_jsx(PageSection, { children: _jsxs(Alert, { variant: "danger", isInline: true, title: "This instance failed", "data-testid": "instance-error", children: [_jsx("pre", { className: "sz-mono sz-wrap-anywhere", style: { whiteSpace: 'pre-wrap' }, children: inst.errorMessage ?? 'No error was found in the engine log: open Logs.' }), "Unload it to free its port, fix the cause, then load it again."] }) })), inst.warnings.length > 0 && (_jsx(PageSection, { children: inst.warnings.map((w) => (_jsx(Alert, { variant: "warning", isInline: true, isPlain: true, title: w }, w))) })), _jsx(PageSection, { children: _jsxs(Gallery, { hasGutter: true, minWidths: { default: '100%', lg: '30rem' }, children: [_jsxs(Card, { children: [_jsx(CardTitle, { children: "Instance" }), _jsx(CardBody, { children: _jsx(Terms, { items: [
                                            ['ID', _jsx("span", { className: "sz-mono", children: inst.id })],
                                            ['Pod', _jsx("span", { "data-testid": "instance-pod", children: inst.podId ?? 'this node' })],
                                            ['Model path', _jsx("span", { className: "sz-wrap-anywhere", children: inst.modelPath })],
                                            ['Engine', inst.engine],
                                            ['GPU(s)', gpuText(inst)],
                                            ['Port', inst.port],
                                            ['PIDs', `API server ${inst.processId ?? '—'} · EngineCore ${inst.engineCorePid ?? '—'}`],
                                            ['Created', formatTimestamp(inst.createdAt)],
                                            ['Started', formatTimestamp(inst.startedAt)],
                                            ['Uptime', inst.startedAt ? formatUptime(inst.startedAt, now) : '—'],
                                            ['Sleep mode', inst.sleepModeEnabled ? `enabled${inst.sleptAt ? `, asleep since ${formatTimestamp(inst.sleptAt)}` : ''}` : 'disabled'],
                                            ['Extra args', _jsx("code", { className: "sz-wrap-anywhere", children: inst.extraArgs.join(' ') || '—' })],
                                            ['Log file', _jsx("span", { className: "sz-mono sz-wrap-anywhere", children: inst.logFile ?? '—' })],
                                        ] }) })] }), _jsxs(Card, { children: [_jsx(CardTitle, { children: "Memory" }), _jsxs(CardBody, { children: [_jsx(Terms, { items: [
                                                ['Memory limit', inst.gpuMemoryLimit == null ? 'automatic' : `${inst.gpuMemoryLimit} GB per GPU`],
                                                ['Reserved per GPU', formatBytes(inst.reservedBytesPerGpu)],
                                                ['gpu-memory-utilization', inst.gpuMemoryUtilization ?? '—'],
                                                ['Baseline', baselines(inst)],
                                                ['kvcached', inst.kvcachedEnabled ? `on (${inst.kvcachedIpcName ?? 'no segment'})` : 'off'],
                                            ] }), _jsx("div", { className: "sz-mt-md", children: _jsx(MemoryCard, { inst: inst }) })] })] }), _jsxs(Card, { children: [_jsx(CardTitle, { children: "Traffic" }), _jsx(CardBody, { children: _jsx(TrafficTerms, { id: inst.id }) })] })] }) })] }));
}
/** The instance's ResourceMetrics, measured on its pod (any pod: the locator asks it). */
function TrafficTerms({ id }) {
    const metrics = useInstanceMetrics(id);
    if (metrics.isPending)
        return _jsx(Loading, { what: "its metrics" });
    if (metrics.isError)
        return _jsx(ErrorState, { what: "its metrics", error: metrics.error, onRetry: () => void metrics.refetch() });
    const m = metrics.data;
    const ms = (v) => (v == null ? '—' : `${formatNumber(v)} ms`);
    return (_jsx("div", { "data-testid": "instance-traffic", children: _jsx(Terms, { items: [
                ['Requests answered', formatNumber(m.requestCount)],
                ['In flight', formatNumber(m.activeConnections)],
                ['Latency p50 / p95', `${ms(m.avgResponseTime)} / ${ms(m.p95ResponseTime)}`],
                ['GPU memory used', formatBytes(m.gpuMemoryUsedBytes)],
                ['Measured', formatTimestamp(m.timestamp)],
            ] }) }));
}
