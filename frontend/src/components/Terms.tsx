import {
  DescriptionList,
  DescriptionListDescription,
  DescriptionListGroup,
  DescriptionListTerm,
} from '@patternfly/react-core';
import type { ReactNode } from 'react';

/** A compact horizontal term/value list (the cards of the About and instance pages). */
export function Terms({ items }: { items: Array<[string, ReactNode]> }) {
  return (
    <DescriptionList isHorizontal isCompact>
      {items.map(([term, value]) => (
        <DescriptionListGroup key={term}>
          <DescriptionListTerm>{term}</DescriptionListTerm>
          <DescriptionListDescription>{value}</DescriptionListDescription>
        </DescriptionListGroup>
      ))}
    </DescriptionList>
  );
}
