import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Alert, Content, Label, Spinner } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useNow } from '../hooks/useNow';
import { formatDuration } from '../lib/format';
import { MOVE_STATE_COLOR, moveElapsed, moveFinished, moveRoute, moveTimeline } from '../lib/moves';
export function MoveStateLabel({ move }) {
    return (_jsx(Label, { isCompact: true, color: MOVE_STATE_COLOR[move.state] ?? 'grey', "data-testid": "move-state", "data-state": move.state, children: move.state }));
}
/** A move's steps as they happen, each with its time since the move began and since
 *  the step before (how long the target took to start, the drain, ...). */
export function MoveSteps({ move }) {
    const now = useNow();
    const finished = moveFinished(move);
    const steps = moveTimeline(move);
    return (_jsxs("div", { "data-testid": "move-steps", "data-move-id": move.id, "data-state": move.state, children: [_jsxs(Content, { component: "p", children: [_jsx("strong", { children: move.model }), ": ", moveRoute(move), " ", _jsx(MoveStateLabel, { move: move }), ' ', !finished && _jsx(Spinner, { size: "sm", "aria-label": "moving" }), " ", formatDuration(moveElapsed(move, now)), finished ? ' in all' : ' so far'] }), move.state === 'failed' && (_jsxs(Alert, { isInline: true, variant: "danger", title: `The move failed${move.code ? ` (${move.code})` : ''}`, className: "sz-mt-md", children: [move.reason ?? 'No reason given.', " The source instance kept serving unless a step below says otherwise."] })), steps.length > 0 && (_jsxs(Table, { "aria-label": `Steps of move ${move.id}`, variant: "compact", className: "sz-mt-md", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Step" }), _jsx(Th, { modifier: "fitContent", children: "At" }), _jsx(Th, { modifier: "fitContent", children: "Took" }), _jsx(Th, { children: "Detail" })] }) }), _jsx(Tbody, { children: steps.map((s, i) => (_jsxs(Tr, { "data-testid": "move-step", "data-step": s.name, children: [_jsx(Td, { dataLabel: "Step", className: "sz-mono", children: s.name }), _jsxs(Td, { dataLabel: "At", modifier: "nowrap", children: ["+", formatDuration(s.offsetSeconds)] }), _jsx(Td, { dataLabel: "Took", modifier: "nowrap", children: formatDuration(s.tookSeconds) }), _jsx(Td, { dataLabel: "Detail", className: "sz-wrap-anywhere", children: s.detail })] }, `${s.name}-${i}`))) })] }))] }));
}
