import { Alert, Button, Modal, ModalBody, ModalFooter, ModalHeader } from '@patternfly/react-core';
import type { ReactNode } from 'react';

interface Props {
  title: string;
  children: ReactNode;
  confirmLabel: string;
  danger?: boolean;
  busy: boolean;
  error: Error | null;
  onConfirm: () => void;
  onCancel: () => void;
}

/** "Are you sure?" for anything that stops or changes a running engine. */
export function ConfirmModal({ title, children, confirmLabel, danger = false, busy, error, onConfirm, onCancel }: Props) {
  return (
    <Modal isOpen variant="small" onClose={onCancel} aria-labelledby="confirm-title">
      <ModalHeader title={title} labelId="confirm-title" titleIconVariant={danger ? 'warning' : undefined} />
      <ModalBody>
        {children}
        {error && (
          <Alert isInline variant="danger" title={error.message} className="sz-mt-md" />
        )}
      </ModalBody>
      <ModalFooter>
        <Button variant={danger ? 'danger' : 'primary'} onClick={onConfirm} isLoading={busy} isDisabled={busy}>
          {confirmLabel}
        </Button>
        <Button variant="link" onClick={onCancel}>
          Cancel
        </Button>
      </ModalFooter>
    </Modal>
  );
}
