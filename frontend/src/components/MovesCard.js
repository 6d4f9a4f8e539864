import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Button, Card, CardBody, CardTitle, Content } from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { isMissingRoute } from '../api/client';
import { useMoves } from '../api/queries';
import { useNow } from '../hooks/useNow';
import { formatDuration, formatTimestamp } from '../lib/format';
import { moveElapsed, moveRoute } from '../lib/moves';
import { MoveProgressModal } from './MoveModal';
import { MoveStateLabel } from './MoveSteps';
/** The moves the leader holds (newest first, kept in its memory): state and duration;
 *  a row opens the move's steps. */
export function MovesCard() {
    const moves = useMoves();
    const now = useNow();
    const [open, setOpen] = useState(null);
    if (moves.isError && isMissingRoute(moves.error))
        return null;
    return (_jsxs(Card, { className: "sz-mt-md", "data-testid": "moves-card", children: [_jsx(CardTitle, { children: "Moves" }), _jsxs(CardBody, { children: [moves.isError && _jsxs(Content, { component: "p", children: ["Could not list the moves: ", moves.error.message] }), moves.data?.length === 0 && (_jsx(Content, { component: "p", children: "No moves yet (the leader keeps the last 100 in memory). Start one with Move on an instance." })), moves.data && moves.data.length > 0 && (_jsxs(Table, { "aria-label": "Moves", variant: "compact", children: [_jsx(Thead, { children: _jsxs(Tr, { children: [_jsx(Th, { children: "Model" }), _jsx(Th, { children: "From \u2192 to" }), _jsx(Th, { modifier: "fitContent", children: "State" }), _jsx(Th, { modifier: "fitContent", children: "Started" }), _jsx(Th, { modifier: "fitContent", children: "Duration" }), _jsx(Th, { screenReaderText: "Steps", modifier: "fitContent" })] }) }), _jsx(Tbody, { children: moves.data.map((m) => (_jsxs(Tr, { "data-move-id": m.id, "data-state": m.state, children: [_jsx(Td, { dataLabel: "Model", children: m.model }), _jsx(Td, { dataLabel: "From \u2192 to", children: moveRoute(m) }), _jsx(Td, { dataLabel: "State", children: _jsx(MoveStateLabel, { move: m }) }), _jsx(Td, { dataLabel: "Started", modifier: "nowrap", children: formatTimestamp(m.createdAt) }), _jsx(Td, { dataLabel: "Duration", modifier: "nowrap", children: formatDuration(moveElapsed(m, now)) }), _jsx(Td, { dataLabel: "Steps", children: _jsx(Button, { variant: "link", isInline: true, onClick: () => setOpen(m.id), children: "Steps" }) })] }, m.id))) })] }))] }), open && _jsx(MoveProgressModal, { moveId: open, onClose: () => setOpen(null) })] }));
}
