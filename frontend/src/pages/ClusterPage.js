import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Card, CardBody, CardTitle, CodeBlock, CodeBlockCode, Content, Gallery, PageSection } from '@patternfly/react-core';
import { useState } from 'react';
import { useClusterStatus } from '../api/queries';
import { useCanMutateIfKnown } from '../auth/AuthContext';
import { MoveModal } from '../components/MoveModal';
import { MovesCard } from '../components/MovesCard';
import { ClusterOverview } from '../components/ClusterOverview';
import { NodeModelPane } from '../components/NodeModelPane';
import { PageHeader } from '../components/PageHeader';
import { ErrorState, Loading } from '../components/States';
import { orderedPods } from '../lib/cluster';
const FORM_A_CLUSTER = `# on every node, the same list (each node may be in it) and the same secret:
CLUSTER_PEERS=10.0.0.1:3000,10.0.0.2:3000,10.0.0.3:3000
CLUSTER_SECRET=<at least 32 random characters>
POD_NAME=node-1            # optional: a stable pod id
sardeenz serve --host 0.0.0.0`;
/** The single-node explanation: what this node is and how to make it a cluster. */
function SingleNode({ podId }) {
    return (_jsxs(Card, { "data-testid": "cluster-single", children: [_jsx(CardTitle, { children: "Single node" }), _jsxs(CardBody, { children: [_jsxs(Content, { component: "p", children: ["This node", podId ? ` (${podId})` : '', " runs alone: it serves its own models and has no peers. To form a cluster, start every node with the same peer list and secret; the nodes then elect a leader, share one routing table (any node answers ", _jsx("code", { children: "/v1" }), " for a model served by another) and this page lists them all."] }), _jsx(CodeBlock, { className: "sz-mt-md", children: _jsx(CodeBlockCode, { children: FORM_A_CLUSTER }) }), _jsxs(Content, { component: "p", className: "sz-mt-md", children: ["In Kubernetes the pods find each other through the API server instead. See ", _jsx("code", { children: "docs/cluster.md" }), "."] })] })] }));
}
export default function ClusterPage() {
    const status = useClusterStatus();
    const s = status.data;
    const canMutate = useCanMutateIfKnown();
    const [moving, setMoving] = useState(null);
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Cluster", description: "The pods, their leader and what each one runs, as this pod sees them (refreshed every 2 s)." }), _jsxs(PageSection, { children: [status.isPending && _jsx(Loading, { what: "the cluster status" }), status.isError && _jsx(ErrorState, { what: "the cluster status", error: status.error, onRetry: () => void status.refetch() }), s?.mode === 'single' && _jsx(SingleNode, { podId: s.podId }), s && s.mode !== 'single' && (_jsxs(_Fragment, { children: [_jsxs(Card, { children: [_jsx(CardTitle, { children: "Overview" }), _jsx(CardBody, { children: _jsx(ClusterOverview, { status: s }) })] }), _jsx(Gallery, { hasGutter: true, minWidths: { default: '100%', xl: '36rem' }, className: "sz-mt-md", children: orderedPods(s).map((pod) => (_jsx(NodeModelPane, { pod: pod, onMove: canMutate && s.leader !== null ? (inst) => setMoving({ inst, podId: pod.id }) : undefined }, pod.id))) }), _jsx(MovesCard, {})] })), moving && s && _jsx(MoveModal, { inst: moving.inst, podId: moving.podId, status: s, onClose: () => setMoving(null) })] })] }));
}
