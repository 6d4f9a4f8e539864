import { jsx as _jsx, Fragment as _Fragment, jsxs as _jsxs } from "react/jsx-runtime";
import { Button } from '@patternfly/react-core';
import { useState } from 'react';
import { CreateProfileModal } from './CreateProfileModal';
export function CreateProfileButton({ inst }) {
    const [open, setOpen] = useState(false);
    return (_jsxs(_Fragment, { children: [_jsx(Button, { size: "sm", variant: "secondary", onClick: () => setOpen(true), children: "Save memory profile" }), open && _jsx(CreateProfileModal, { candidates: [inst], onClose: () => setOpen(false) })] }));
}
