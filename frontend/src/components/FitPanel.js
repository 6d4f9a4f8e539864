import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, Content, List, ListItem, Spinner } from '@patternfly/react-core';
import { isMissingRoute } from '../api/client';
import { describeVerdict } from '../lib/fitVerdict';
function VerdictAlert({ verdict }) {
    const view = describeVerdict(verdict);
    return (_jsx(Alert, { isInline: true, isPlain: true, variant: view.variant, title: view.title, "data-testid": "fit-verdict", "data-fits": String(verdict.fits), children: _jsx(List, { isPlain: true, children: view.details.map((line) => (_jsx(ListItem, { children: line }, line))) }) }));
}
/** The live answer to "will it fit?". */
export function FitPanel({ fit, idleText }) {
    if (fit.fetchStatus === 'idle' && fit.isPending)
        return _jsx(Content, { component: "small", children: idleText });
    if (fit.isFetching && !fit.data) {
        return (_jsxs(Content, { component: "small", children: [_jsx(Spinner, { size: "sm", "aria-label": "Checking fit" }), " Checking whether it fits\u2026"] }));
    }
    if (fit.isError) {
        const text = isMissingRoute(fit.error)
            ? 'This server has no fit check (memory profiles are not available).'
            : `Fit check failed: ${fit.error.message}`;
        return _jsx(Alert, { isInline: true, isPlain: true, variant: "warning", title: text });
    }
    return fit.data ? _jsx(VerdictAlert, { verdict: fit.data }) : null;
}
