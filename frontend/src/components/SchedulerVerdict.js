import { jsx as _jsx, jsxs as _jsxs, Fragment as _Fragment } from "react/jsx-runtime";
import { Alert, Content, Spinner } from '@patternfly/react-core';
import { isMissingRoute } from '../api/client';
import { PodReasons } from './PresetPlanView';
/** Per pod, why it cannot take the load, sorted by pod. */
export function verdictReasons(v) {
    return Object.entries(v.reasons ?? {}).sort(([a], [b]) => a.localeCompare(b));
}
/** The scheduler's dry run for the load being typed with "Any (scheduler)": where it
 *  would go and what the chosen GPUs keep free, or why no pod can take it. */
export function SchedulerVerdict({ verdict }) {
    if (verdict.fetchStatus === 'idle' && verdict.isPending) {
        return _jsx(Content, { component: "small", children: "Enter a model path to see where the scheduler would place it." });
    }
    if (verdict.isFetching && !verdict.data) {
        return (_jsxs(Content, { component: "small", children: [_jsx(Spinner, { size: "sm", "aria-label": "Asking the scheduler" }), " Asking the scheduler\u2026"] }));
    }
    if (verdict.isError) {
        const text = isMissingRoute(verdict.error)
            ? 'This server has no scheduler dry run.'
            : `The scheduler could not be asked: ${verdict.error.message}`;
        return _jsx(Alert, { isInline: true, isPlain: true, variant: "warning", title: text });
    }
    const v = verdict.data;
    if (!v)
        return null;
    return (_jsxs(Alert, { isInline: true, isPlain: true, variant: v.placed ? 'info' : 'danger', title: v.placed ? `Scheduler: ${v.verdict}` : `Scheduler: no pod can take it (${v.strategy})`, "data-testid": "schedule-verdict", "data-placed": String(v.placed), "data-pod-id": v.podId ?? '', children: [!v.placed && (_jsxs(_Fragment, { children: [verdictReasons(v).length === 0 && _jsx(Content, { component: "small", children: v.verdict }), _jsx(PodReasons, { reasons: verdictReasons(v) })] })), v.placed && _jsxs(Content, { component: "small", children: ["Strategy ", v.strategy, "; the pod\u2019s own ledger still admits the load."] })] }));
}
