import {
  ActionGroup,
  Alert,
  Bullseye,
  Button,
  Card,
  CardBody,
  CardTitle,
  Content,
  Divider,
  Form,
  FormGroup,
  TextArea,
} from '@patternfly/react-core';
import { useState } from 'react';
import { useLocation } from 'react-router';
import { useAuth } from './AuthContext';
import { startLogin } from './oidc';

/** Log in with the identity provider (OIDC + PKCE) or a pasted bearer token. */
export function LoginPage() {
  const { config, login, loginMessage } = useAuth();
  const location = useLocation();
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (): Promise<void> => {
    setBusy(true);
    setError(null);
    try {
      await login(token.trim().replace(/^Bearer\s+/i, ''));
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  const oidc = config.oidc;

  return (
    <Bullseye className="sz-p-lg">
      <Card style={{ maxWidth: '36rem', width: '100%' }}>
        <CardTitle component="h1">Log in to Sardeenz</CardTitle>
        <CardBody>
          {loginMessage && <Alert isInline variant="warning" title={loginMessage} className="sz-mb-md" />}
          {oidc && (
            <>
              <Button
                variant="primary"
                isBlock
                onClick={() =>
                  startLogin(oidc, `${location.pathname}${location.search}`).catch((e: unknown) => setError((e as Error).message))
                }
              >
                Log in with {new URL(oidc.issuer).host}
              </Button>
              <Divider className="sz-my-lg" />
            </>
          )}
          <Form
            onSubmit={(e) => {
              e.preventDefault();
              void submit();
            }}
          >
            <FormGroup label="Bearer token" fieldId="login-token" isRequired>
              <TextArea
                id="login-token"
                value={token}
                onChange={(_e, v) => setToken(v)}
                rows={4}
                className="sz-mono"
                placeholder="eyJhbGciOi…"
                resizeOrientation="vertical"
              />
            </FormGroup>
            <Content component="small">
              A JWT with the role admin or admin-readonly. It is kept in this tab only (sessionStorage) and sent as
              Authorization: Bearer.
            </Content>
            {error && <Alert isInline variant="danger" title={error} />}
            <ActionGroup>
              <Button type="submit" variant={oidc ? 'secondary' : 'primary'} isDisabled={!token.trim() || busy} isLoading={busy}>
                Log in with token
              </Button>
            </ActionGroup>
          </Form>
        </CardBody>
      </Card>
    </Bullseye>
  );
}
