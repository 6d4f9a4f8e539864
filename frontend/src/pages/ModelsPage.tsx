import { Button, Card, CardBody, Flex, FlexItem, PageSection } from '@patternfly/react-core';
import { useSearchParams } from 'react-router';
import { useClustered, useInstances } from '../api/queries';
import { useCanMutate } from '../auth/AuthContext';
import { ButtonLink } from '../components/ButtonLink';
import { InstanceRowActions } from '../components/InstanceRowActions';
import { InstanceTable } from '../components/InstanceTable';
import { LoadModelModal } from '../components/LoadModelModal';
import { MoveDialogHost } from '../components/MoveAction';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';

export default function ModelsPage() {
  const cluster = useClustered();
  const instances = useInstances(cluster ? 2000 : undefined);
  const canMutate = useCanMutate();
  const [params, setParams] = useSearchParams();
  const loading = params.get('load') === '1';
  const setLoading = (open: boolean): void => setParams(open ? { load: '1' } : {}, { replace: true });

  const loadButton = canMutate && (
    <Button variant="primary" onClick={() => setLoading(true)}>
      Load model
    </Button>
  );

  return (
    <>
      <PageHeader
        title="Models"
        description="Load, sleep, wake and unload engines. Every action here is also in the API (/docs)."
        actions={loadButton}
      />
      <PageSection>
        <Card>
          <CardBody>
            {instances.isPending && <Loading what="instances" />}
            {instances.isError && (
              <ErrorState what="instances" error={instances.error} onRetry={() => void instances.refetch()} />
            )}
            {instances.data?.length === 0 && (
              <Empty title="No models loaded">
                {canMutate ? 'Load one with “Load model” to serve it at /v1.' : 'An admin can load one.'}
              </Empty>
            )}
            {instances.data && instances.data.length > 0 && (
              <InstanceTable
                instances={instances.data}
                // The pod's own instances may come without podId (its event stream): they are its.
                podOf={cluster && ((inst) => inst.podId ?? cluster.podId ?? '—')}
                actions={{
                  heading: 'Actions',
                  render: (inst) => (
                    <Flex spaceItems={{ default: 'spaceItemsSm' }} flexWrap={{ default: 'nowrap' }} alignItems={{ default: 'alignItemsCenter' }}>
                      <FlexItem>
                        <ButtonLink to={`/logs/${inst.id}`} variant="link" size="sm">
                          Logs
                        </ButtonLink>
                      </FlexItem>
                      <FlexItem>
                        <InstanceRowActions inst={inst} />
                      </FlexItem>
                    </Flex>
                  ),
                }}
              />
            )}
          </CardBody>
        </Card>
      </PageSection>
      {loading && canMutate && <LoadModelModal onClose={() => setLoading(false)} />}
      <MoveDialogHost />
    </>
  );
}
