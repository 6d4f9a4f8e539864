import { Content, Flex, FlexItem, PageSection, Title } from '@patternfly/react-core';
import type { ReactNode } from 'react';

/** A page's title and description, its main action at the top right: a long description
 *  wraps beside the action instead of pushing it below (as it did on Presets). */
export function PageHeader({ title, description, actions }: { title: string; description?: ReactNode; actions?: ReactNode }) {
  return (
    <PageSection>
      <Flex
        justifyContent={{ default: 'justifyContentSpaceBetween' }}
        alignItems={{ default: 'alignItemsFlexStart' }}
        flexWrap={{ default: 'wrap', md: 'nowrap' }}
      >
        <FlexItem flex={{ md: 'flex_1' }}>
          <Title headingLevel="h1">{title}</Title>
          {description && <Content component="p">{description}</Content>}
        </FlexItem>
        {actions && <FlexItem>{actions}</FlexItem>}
      </Flex>
    </PageSection>
  );
}
