import { Alert, Bullseye, Button, Spinner } from '@patternfly/react-core';
import { useEffect, useRef, useState } from 'react';
import { useNavigate } from 'react-router';
import { useAuth } from './AuthContext';
import { finishLogin } from './oidc';

/** Where the identity provider sends the browser back: trade the code for a token. */
export function OidcCallback() {
  const { login } = useAuth();
  const navigate = useNavigate();
  const [error, setError] = useState<string | null>(null);
  const started = useRef(false);

  useEffect(() => {
    if (started.current) return; // the code can be redeemed only once (StrictMode runs effects twice)
    started.current = true;
    finishLogin(window.location.search)
      .then(async ({ token, returnTo }) => {
        await login(token);
        void navigate(returnTo || '/', { replace: true });
      })
      .catch((e: unknown) => setError(e instanceof Error ? e.message : String(e)));
  }, [login, navigate]);

  return (
    <Bullseye className="sz-p-xl">
      {error ? (
        <Alert
          variant="danger"
          title="Login failed"
          actionLinks={
            <Button variant="link" isInline onClick={() => void navigate('/', { replace: true })}>
              Back to the login page
            </Button>
          }
        >
          {error}
        </Alert>
      ) : (
        <Spinner aria-label="Completing login" />
      )}
    </Bullseye>
  );
}
