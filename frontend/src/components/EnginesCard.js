import { jsx as _jsx, Fragment as _Fragment, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, Card, CardBody, CardTitle, Content } from '@patternfly/react-core';
import { isMissingRoute } from '../api/client';
import { ErrorState, Loading } from './States';
import { Terms } from './Terms';
const SHUTDOWN_TIMEOUT = _jsx("code", { className: "sz-nowrap", children: "--shutdown-timeout" });
function Interpreter({ python }) {
    return (_jsx("span", { className: "sz-mono sz-wrap-anywhere", "data-testid": "vllm-python", children: python }));
}
function vllmTerms(v) {
    return [
        ['vLLM', _jsx("span", { "data-testid": "vllm-version", children: v.version })],
        [
            'Build',
            _jsxs("span", { "data-testid": "vllm-build", children: [v.cpuBuild ? 'CPU' : 'CUDA', " build", v.distribution && _jsxs(_Fragment, { children: [" (package ", _jsx("code", { children: v.distribution }), ")"] }), ", runs on", ' ', v.device === 'cpu' ? 'the CPU' : 'CUDA GPUs'] }),
        ],
        ['Interpreter', _jsx(Interpreter, { python: v.python })],
        ['Sleep mode', v.supportsSleep ? 'available (levels 1 and 2)' : 'not available on the CPU: it frees CUDA memory'],
        [
            'Unload',
            v.drainsOnStop
                ? _jsxs(_Fragment, { children: ["drains: requests in flight finish first (", SHUTDOWN_TIMEOUT, ")"] })
                : _jsxs(_Fragment, { children: ["does not drain: requests in flight are cut off (", SHUTDOWN_TIMEOUT, " needs vLLM 0.22 or newer)"] }),
        ],
    ];
}
/** No vLLM behind SARDEENZ_VLLM_PYTHON: why, and what to do about it. */
function NoVllm({ error }) {
    return (_jsxs(Alert, { isInline: true, isPlain: true, variant: "info", title: "vLLM not found", className: "sz-mb-md", "data-testid": "vllm-not-found", children: [_jsx(Content, { component: "p", "data-testid": "vllm-error", children: error ?? 'vllm is not installed for this interpreter' }), _jsxs(Content, { component: "p", children: ["This node runs the simulated engine only. To run vLLM, point ", _jsx("code", { children: "SARDEENZ_VLLM_PYTHON" }), " at the Python interpreter of a vLLM install and restart the node."] })] }));
}
function Body({ engines }) {
    if (engines.isPending)
        return _jsx(Loading, { what: "engines" });
    if (engines.isError && isMissingRoute(engines.error))
        return _jsx(_Fragment, { children: "This server version does not report its engines." });
    if (engines.isError)
        return _jsx(ErrorState, { what: "engines", error: engines.error, onRetry: () => void engines.refetch() });
    const { vllm, sim } = engines.data;
    const simTerm = ['Simulated engine', sim.available ? 'available (vLLM’s API, no model)' : 'not available'];
    if (vllm.found)
        return _jsx(Terms, { items: [...vllmTerms(vllm), simTerm] });
    return (_jsxs(_Fragment, { children: [_jsx(NoVllm, { error: vllm.error }), _jsx(Terms, { items: [['Interpreter', _jsx(Interpreter, { python: vllm.python })], simTerm] })] }));
}
/** What this node can launch: its vLLM install (`GET /api/v1/engines`) and the simulated engine. */
export function EnginesCard({ engines }) {
    return (_jsxs(Card, { "data-testid": "engines-card", children: [_jsx(CardTitle, { children: "Engines" }), _jsx(CardBody, { children: _jsx(Body, { engines: engines }) })] }));
}
