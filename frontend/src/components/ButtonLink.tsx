import { Button, type ButtonProps } from '@patternfly/react-core';
import type { MouseEvent } from 'react';
import { useNavigate } from 'react-router';

/** A button that navigates inside the app (a real link: middle-click opens a tab). */
export function ButtonLink({ to, ...props }: Omit<ButtonProps, 'component' | 'href' | 'onClick'> & { to: string }) {
  const navigate = useNavigate();
  const onClick = (e: MouseEvent): void => {
    if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    void navigate(to);
  };
  return <Button {...props} component="a" href={to} onClick={onClick} />;
}
