import { Content, Flex, FlexItem, PageSection, Title } from '@patternfly/react-core';
import type { ReactNode } from 'react';

export function PageHeader({ title, description, actions }: { title: string; description?: ReactNode; actions?: ReactNode }) {
  return (
    <PageSection>
      <Flex justifyContent={{ default: 'justifyContentSpaceBetween' }} alignItems={{ default: 'alignItemsFlexStart' }}>
        <FlexItem>
          <Title headingLevel="h1">{title}</Title>
          {description && <Content component="p">{description}</Content>}
        </FlexItem>
        {actions && <FlexItem>{actions}</FlexItem>}
      </Flex>
    </PageSection>
  );
}
