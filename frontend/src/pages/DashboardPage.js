import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Card, CardBody, CardTitle, Flex, FlexItem, Gallery, PageSection } from '@patternfly/react-core';
import { useEffect } from 'react';
import { useClustered, useGpus, useInstances } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { GpuMemoryBars } from '../components/GpuMemoryBars';
import { InstanceTable } from '../components/InstanceTable';
import { PageHeader } from '../components/PageHeader';
import { RequestSummary } from '../components/RequestSummary';
import { Empty, ErrorState, Loading } from '../components/States';
import { StatusLabel } from '../components/StatusLabel';
import { markOnce } from '../lib/perf';
const STATUSES = ['active', 'starting', 'sleeping', 'stopping', 'failed'];
function GpuCard() {
    const gpus = useGpus();
    const instances = useInstances();
    if (gpus.isPending)
        return _jsx(Loading, { what: "GPUs" });
    if (gpus.isError)
        return _jsx(ErrorState, { what: "GPUs", error: gpus.error, onRetry: () => void gpus.refetch() });
    if (!gpus.data.available || gpus.data.gpus.length === 0) {
        return (_jsxs(Empty, { title: "No GPUs on this node", children: [gpus.data.reason ?? 'The NVIDIA driver reports none.', " Engines run on the CPU; start the server with --sim-gpus to try placement with simulated GPUs."] }));
    }
    return _jsx(GpuMemoryBars, { report: gpus.data, instances: instances.data ?? [] });
}
export function DashboardPage() {
    const cluster = useClustered();
    const instances = useInstances();
    const canMutate = useCanMutate();
    const ready = instances.isSuccess;
    useEffect(() => {
        if (ready)
            markOnce('sardeenz:dashboard-ready');
    }, [ready]);
    const counts = new Map();
    for (const inst of instances.data ?? [])
        counts.set(inst.status, (counts.get(inst.status) ?? 0) + 1);
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Dashboard", description: "Every engine on this node, its GPU memory and its traffic, live." }), _jsx(PageSection, { children: _jsxs(Gallery, { hasGutter: true, minWidths: { default: '100%', lg: 'calc(50% - var(--pf-t--global--spacer--gutter--default))' }, children: [_jsxs(Card, { children: [_jsx(CardTitle, { children: "GPU memory" }), _jsx(CardBody, { children: _jsx(GpuCard, {}) })] }), _jsxs(Card, { children: [_jsx(CardTitle, { children: "Requests" }), _jsx(CardBody, { children: _jsx(RequestSummary, {}) })] })] }) }), _jsx(PageSection, { children: _jsxs(Card, { children: [_jsx(CardTitle, { children: _jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, alignItems: { default: 'alignItemsCenter' }, children: [_jsx(FlexItem, { children: "Instances" }), STATUSES.filter((s) => counts.has(s)).map((s) => (_jsx(FlexItem, { children: _jsx(StatusLabel, { status: s, count: counts.get(s) ?? 0 }) }, s)))] }) }), _jsxs(CardBody, { children: [instances.isPending && _jsx(Loading, { what: "instances" }), instances.isError && (_jsx(ErrorState, { what: "instances", error: instances.error, onRetry: () => void instances.refetch() })), instances.data?.length === 0 && (_jsx(Empty, { title: "No models loaded", actions: canMutate && (_jsx(ButtonLink, { to: "/models?load=1", variant: "primary", children: "Load a model" })), children: "Load one from the Models page; it appears here as it starts." })), instances.data && instances.data.length > 0 && (_jsx(InstanceTable, { instances: instances.data, 
                                    // The pod's own instances may come without podId (its event stream): they are its.
                                    podOf: cluster && ((inst) => inst.podId ?? cluster.podId ?? '—') }))] })] }) })] }));
}
