import { FormHelperText, HelperText, HelperTextItem } from '@patternfly/react-core';
import type { ReactNode } from 'react';

/** A form field's helper line: its error when it has one, else the hint (if any). */
export function FieldHelper({ error, children }: { error: string | undefined; children?: ReactNode }) {
  if (!error && !children) return null;
  return (
    <FormHelperText>
      <HelperText>
        <HelperTextItem variant={error ? 'error' : 'default'}>{error ?? children}</HelperTextItem>
      </HelperText>
    </FormHelperText>
  );
}
