import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
// Loading, error and empty states that tell the operator what to do next.
import { Bullseye, Button, EmptyState, EmptyStateActions, EmptyStateBody, EmptyStateFooter, Spinner, } from '@patternfly/react-core';
import { ExclamationCircleIcon } from '@patternfly/react-icons/dist/esm/icons/exclamation-circle-icon';
import { CubesIcon } from '@patternfly/react-icons/dist/esm/icons/cubes-icon';
import { ApiError } from '../api/client';
export function Loading({ what }) {
    return (_jsx(Bullseye, { children: _jsx(Spinner, { size: "lg", "aria-label": `Loading ${what}` }) }));
}
/** What the operator can do about an error, by its stable code or status. */
function nextStep(error) {
    if (!(error instanceof ApiError))
        return 'Reload the page; if it persists, check the server log.';
    if (error.code === 'network_error')
        return 'Check that `sardeenz serve` is running and reachable, then retry.';
    if (error.status === 401)
        return 'Log in again.';
    if (error.status === 403)
        return 'Your role does not allow this; ask an admin.';
    if (error.status === 404 && error.code === 'not_found')
        return 'This server version does not offer it.';
    if (error.status >= 500)
        return 'The server failed: see its log (`sardeenz serve` output) for the traceback.';
    return 'Correct the request and try again.';
}
export function ErrorState({ error, onRetry, what }) {
    const message = error instanceof Error ? error.message : String(error);
    return (_jsxs(EmptyState, { titleText: `Could not load ${what}`, headingLevel: "h2", icon: ExclamationCircleIcon, status: "danger", children: [_jsxs(EmptyStateBody, { children: [message, _jsx("br", {}), nextStep(error)] }), onRetry && (_jsx(EmptyStateFooter, { children: _jsx(EmptyStateActions, { children: _jsx(Button, { variant: "primary", onClick: onRetry, children: "Retry" }) }) }))] }));
}
export function Empty({ title, children, actions }) {
    return (_jsxs(EmptyState, { titleText: title, headingLevel: "h2", icon: CubesIcon, variant: "sm", children: [children && _jsx(EmptyStateBody, { children: children }), actions && (_jsx(EmptyStateFooter, { children: _jsx(EmptyStateActions, { children: actions }) }))] }));
}
