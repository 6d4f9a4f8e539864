import {
  Button,
  Card,
  CardBody,
  Flex,
  FlexItem,
  Form,
  FormGroup,
  Modal,
  ModalBody,
  ModalFooter,
  ModalHeader,
  PageSection,
  TextInput,
} from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr } from '@patternfly/react-table';
import { useState } from 'react';
import { isMissingRoute } from '../api/client';
import { useDeleteProfile, useFitCheck, useGpus, useInstances, useProfiles } from '../api/queries';
import type { FitRequest, MemoryProfile } from '../api/types';
import { useCanMutate } from '../auth/AuthContext';
import { ConfirmModal } from '../components/ConfirmModal';
import { CreateProfileModal, profileCandidates } from '../components/CreateProfileModal';
import { FitPanel } from '../components/FitPanel';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { useDebounced } from '../hooks/useDebounced';
import { formatGiB, formatNumber, formatTimestamp } from '../lib/format';

function FitCheckModal({ initial, onClose }: { initial: MemoryProfile | null; onClose: () => void }) {
  const [modelPath, setModelPath] = useState(initial?.modelPath ?? '');
  const [maxTokens, setMaxTokens] = useState(initial ? String(initial.maxTokens) : '');
  const [tp, setTp] = useState('1');
  const gpus = useGpus();
  const question: FitRequest | null = modelPath.trim()
    ? {
        modelPath: modelPath.trim(),
        tensorParallelSize: Math.max(1, Number(tp) || 1),
        ...(Number(maxTokens) > 0 ? { maxTokens: Math.floor(Number(maxTokens)) } : {}),
      }
    : null;
  const fit = useFitCheck(useDebounced(question, 400));
  return (
    <Modal isOpen variant="medium" onClose={onClose} aria-labelledby="fit-title">
      <ModalHeader title="Will it fit?" labelId="fit-title" description="Checked against the GPUs' free memory now." />
      <ModalBody>
        <Form onSubmit={(e) => e.preventDefault()}>
          <FormGroup label="Model path" fieldId="fit-model" isRequired>
            <TextInput id="fit-model" value={modelPath} onChange={(_e, v) => setModelPath(v)} />
          </FormGroup>
          <Flex>
            <FlexItem>
              <FormGroup label="Context length (max tokens)" fieldId="fit-max-tokens">
                <TextInput id="fit-max-tokens" type="number" value={maxTokens} onChange={(_e, v) => setMaxTokens(v)} placeholder="model default" />
              </FormGroup>
            </FlexItem>
            <FlexItem>
              <FormGroup label="Tensor parallel size" fieldId="fit-tp">
                <TextInput id="fit-tp" type="number" min={1} value={tp} onChange={(_e, v) => setTp(v)} />
              </FormGroup>
            </FlexItem>
          </Flex>
        </Form>
        <div className="sz-mt-md">
          {gpus.data && !gpus.data.available ? (
            <Empty title="No GPUs on this node">There is no GPU memory to check against.</Empty>
          ) : (
            <FitPanel fit={fit} idleText="Enter a model path." />
          )}
        </div>
      </ModalBody>
      <ModalFooter>
        <Button variant="primary" onClick={onClose}>
          Close
        </Button>
      </ModalFooter>
    </Modal>
  );
}

type Dialog = { kind: 'create' } | { kind: 'check'; profile: MemoryProfile | null } | { kind: 'delete'; profile: MemoryProfile };

export default function ProfilesPage() {
  const profiles = useProfiles();
  const instances = useInstances();
  const canMutate = useCanMutate();
  const remove = useDeleteProfile();
  const [dialog, setDialog] = useState<Dialog | null>(null);
  const candidates = profileCandidates(instances.data ?? []);

  const actions = canMutate && (
    <Flex spaceItems={{ default: 'spaceItemsSm' }}>
      <FlexItem>
        <Button variant="secondary" onClick={() => setDialog({ kind: 'check', profile: null })}>
          Check fit
        </Button>
      </FlexItem>
      <FlexItem>
        <Button variant="primary" isAriaDisabled={candidates.length === 0} onClick={() => setDialog({ kind: 'create' })}>
          Create from instance
        </Button>
      </FlexItem>
    </Flex>
  );

  let body;
  if (profiles.isPending) body = <Loading what="memory profiles" />;
  else if (profiles.isError && isMissingRoute(profiles.error)) body = <Empty title="Memory profiles are not available on this server" />;
  else if (profiles.isError) body = <ErrorState what="memory profiles" error={profiles.error} onRetry={() => void profiles.refetch()} />;
  else if (profiles.data.length === 0) {
    body = (
      <Empty title="No memory profiles">
        A profile records what a model really took on a GPU; fit checks prefer it to estimates.{' '}
        {candidates.length > 0 ? 'Create one from a running instance.' : 'Load a model, then create one from it once it is active.'}
      </Empty>
    );
  } else {
    body = (
      <Table aria-label="Memory profiles" variant="compact" gridBreakPoint="grid-lg">
        <Thead>
          <Tr>
            <Th modifier="wrap">Name</Th>
            <Th modifier="wrap">Model</Th>
            <Th modifier="wrap">Max tokens</Th>
            <Th modifier="wrap">Total</Th>
            <Th modifier="wrap">Weights</Th>
            <Th modifier="wrap">CUDA graphs</Th>
            <Th modifier="wrap">Overhead</Th>
            <Th modifier="wrap">KV cache</Th>
            <Th modifier="wrap">GPU</Th>
            <Th modifier="wrap">Created</Th>
            {canMutate && <Th screenReaderText="Actions" />}
          </Tr>
        </Thead>
        <Tbody>
          {profiles.data.map((p) => (
            <Tr key={p.id} data-profile-id={p.id}>
              <Td dataLabel="Name">{p.profileName}</Td>
              <Td dataLabel="Model" className="sz-wrap-anywhere">
                {p.modelPath}
              </Td>
              <Td dataLabel="Max tokens">{formatNumber(p.maxTokens)}</Td>
              <Td dataLabel="Total">{formatGiB(p.totalGpuMemoryGib)}</Td>
              <Td dataLabel="Weights">{formatGiB(p.weightsMemoryGib)}</Td>
              <Td dataLabel="CUDA graphs">{formatGiB(p.cudaGraphsGib)}</Td>
              <Td dataLabel="Overhead">{formatGiB(p.overheadMemoryGib)}</Td>
              <Td dataLabel="KV cache">
                {formatGiB(p.kvCacheAvailableGib)}
                {p.kvCachePerRequestMib != null && ` (${formatNumber(p.kvCachePerRequestMib)} MiB/request)`}
              </Td>
              <Td dataLabel="GPU">
                {p.gpuName ?? '—'}
                {p.gpuTotalMemoryGib != null && ` (${formatGiB(p.gpuTotalMemoryGib)})`}
              </Td>
              <Td dataLabel="Created">{formatTimestamp(p.createdAt)}</Td>
              {canMutate && (
                <Td dataLabel="Actions">
                  <Flex spaceItems={{ default: 'spaceItemsSm' }} flexWrap={{ default: 'nowrap' }}>
                    <Button variant="link" size="sm" onClick={() => setDialog({ kind: 'check', profile: p })}>
                      Check fit
                    </Button>
                    <Button variant="link" isDanger size="sm" onClick={() => setDialog({ kind: 'delete', profile: p })}>
                      Delete
                    </Button>
                  </Flex>
                </Td>
              )}
            </Tr>
          ))}
        </Tbody>
      </Table>
    );
  }

  const close = (): void => {
    setDialog(null);
    remove.reset();
  };
  return (
    <>
      <PageHeader
        title="Memory profiles"
        description="What models measured on real loads: the fit check uses them before estimates."
        actions={actions}
      />
      <PageSection>
        <Card>
          <CardBody>{body}</CardBody>
        </Card>
      </PageSection>
      {dialog?.kind === 'create' && <CreateProfileModal candidates={candidates} onClose={close} />}
      {dialog?.kind === 'check' && <FitCheckModal initial={dialog.profile} onClose={close} />}
      {dialog?.kind === 'delete' && (
        <ConfirmModal
          title={`Delete profile “${dialog.profile.profileName}”?`}
          confirmLabel="Delete"
          danger
          busy={remove.isPending}
          error={remove.error}
          onCancel={close}
          onConfirm={() => remove.mutate(dialog.profile.id, { onSuccess: close })}
        >
          <p>Fit checks for {dialog.profile.modelPath} fall back to other profiles or estimates.</p>
        </ConfirmModal>
      )}
    </>
  );
}
