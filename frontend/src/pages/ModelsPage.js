import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Button, Card, CardBody, Flex, FlexItem, PageSection } from '@patternfly/react-core';
import { useSearchParams } from 'react-router';
import { useClustered, useInstances } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { InstanceRowActions } from '../components/InstanceRowActions';
import { InstanceTable } from '../components/InstanceTable';
import { LoadModelModal } from '../components/LoadModelModal';
import { MoveDialogHost } from '../components/MoveAction';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
export default function ModelsPage() {
    const cluster = useClustered();
    const instances = useInstances(cluster ? 2000 : undefined);
    const canMutate = useCanMutate();
    const [params, setParams] = useSearchParams();
    const loading = params.get('load') === '1';
    const setLoading = (open) => setParams(open ? { load: '1' } : {}, { replace: true });
    const loadButton = canMutate && (_jsx(Button, { variant: "primary", onClick: () => setLoading(true), children: "Load model" }));
    return (_jsxs(_Fragment, { children: [_jsx(PageHeader, { title: "Models", description: "Load, sleep, wake and unload engines. Every action here is also in the API (/docs).", actions: loadButton }), _jsx(PageSection, { children: _jsx(Card, { children: _jsxs(CardBody, { children: [instances.isPending && _jsx(Loading, { what: "instances" }), instances.isError && (_jsx(ErrorState, { what: "instances", error: instances.error, onRetry: () => void instances.refetch() })), instances.data?.length === 0 && (_jsx(Empty, { title: "No models loaded", children: canMutate ? 'Load one with “Load model” to serve it at /v1.' : 'An admin can load one.' })), instances.data && instances.data.length > 0 && (_jsx(InstanceTable, { instances: instances.data, 
                                // The pod's own instances may come without podId (its event stream): they are its.
                                podOf: cluster && ((inst) => inst.podId ?? cluster.podId ?? '—'), actions: {
                                    heading: 'Actions',
                                    render: (inst) => (_jsxs(Flex, { spaceItems: { default: 'spaceItemsSm' }, flexWrap: { default: 'nowrap' }, alignItems: { default: 'alignItemsCenter' }, children: [_jsx(FlexItem, { children: _jsx(ButtonLink, { to: `/logs/${inst.id}`, variant: "link", size: "sm", children: "Logs" }) }), _jsx(FlexItem, { children: _jsx(InstanceRowActions, { inst: inst }) })] })),
                                } }))] }) }) }), loading && canMutate && _jsx(LoadModelModal, { onClose: () => setLoading(false) }), _jsx(MoveDialogHost, {})] }));
}
