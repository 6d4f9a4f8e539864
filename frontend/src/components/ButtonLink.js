import { jsx as _jsx } from "react/jsx-runtime";
import { Button } from '@patternfly/react-core';
import { useNavigate } from 'react-router';
/** A button that navigates inside the app (a real link: middle-click opens a tab). */
export function ButtonLink({ to, ...props }) {
    const navigate = useNavigate();
    const onClick = (e) => {
        if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0)
            return;
        e.preventDefault();
        void navigate(to);
    };
    return _jsx(Button, { ...props, component: "a", href: to, onClick: onClick });
}
