import { Button } from '@patternfly/react-core';
import { useState } from 'react';
import type { ModelInstance } from '../api/types';
import { CreateProfileModal } from './CreateProfileModal';

export function CreateProfileButton({ inst }: { inst: ModelInstance }) {
  const [open, setOpen] = useState(false);
  return (
    <>
      <Button size="sm" variant="secondary" onClick={() => setOpen(true)}>
        Save memory profile
      </Button>
      {open && <CreateProfileModal candidates={[inst]} onClose={() => setOpen(false)} />}
    </>
  );
}
