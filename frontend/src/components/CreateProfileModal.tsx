import {
  Alert,
  Button,
  Form,
  FormGroup,
  FormSelect,
  FormSelectOption,
  Modal,
  ModalBody,
  ModalFooter,
  ModalHeader,
  TextArea,
  TextInput,
} from '@patternfly/react-core';
import { useState } from 'react';
import { useCreateProfile } from '../api/queries';
import type { ModelInstance, ProfileCreate } from '../api/types';
import { useNotify } from './Notifications';

interface Props {
  /** Instances a profile can be taken from (active, with parsed memory figures). */
  candidates: ModelInstance[];
  onClose: () => void;
}

/** Save what a running instance measured as a memory profile (used by later fit checks). */
export function CreateProfileModal({ candidates, onClose }: Props) {
  const [instanceId, setInstanceId] = useState(candidates[0]?.id ?? '');
  const [name, setName] = useState('');
  const [comments, setComments] = useState('');
  const create = useCreateProfile();
  const notify = useNotify();
  const chosen = candidates.find((c) => c.id === instanceId);

  const submit = (): void => {
    const body: ProfileCreate = { instanceId };
    if (name.trim()) body.profileName = name.trim();
    if (comments.trim()) body.comments = comments.trim();
    create.mutate(body, {
      onSuccess: (p) => {
        notify('success', `Saved profile “${p.profileName}”`);
        onClose();
      },
    });
  };

  return (
    <Modal isOpen variant="small" onClose={onClose} aria-labelledby="profile-title">
      <ModalHeader title="Create a memory profile" labelId="profile-title" />
      <ModalBody>
        <Form
          id="profile-form"
          onSubmit={(e) => {
            e.preventDefault();
            submit();
          }}
        >
          <FormGroup label="From instance" fieldId="profile-instance" isRequired>
            <FormSelect id="profile-instance" value={instanceId} onChange={(_e, v) => setInstanceId(v)}>
              {candidates.map((c) => (
                <FormSelectOption key={c.id} value={c.id} label={`${c.servedModelName} (${c.id})`} />
              ))}
            </FormSelect>
          </FormGroup>
          <FormGroup label="Profile name" fieldId="profile-name">
            <TextInput
              id="profile-name"
              value={name}
              onChange={(_e, v) => setName(v)}
              placeholder={chosen ? `defaults to ${chosen.modelPath} and its context length` : ''}
            />
          </FormGroup>
          <FormGroup label="Comments" fieldId="profile-comments">
            <TextArea id="profile-comments" value={comments} onChange={(_e, v) => setComments(v)} resizeOrientation="vertical" />
          </FormGroup>
        </Form>
        {create.error && <Alert isInline variant="danger" title={create.error.message} className="sz-mt-md" />}
      </ModalBody>
      <ModalFooter>
        <Button type="submit" form="profile-form" isDisabled={!instanceId || create.isPending} isLoading={create.isPending}>
          Save profile
        </Button>
        <Button variant="link" onClick={onClose}>
          Cancel
        </Button>
      </ModalFooter>
    </Modal>
  );
}

/** Instances a profile can be taken from. */
export function profileCandidates(instances: ModelInstance[]): ModelInstance[] {
  return instances.filter((i) => i.status === 'active' && i.memoryMetrics !== null);
}
