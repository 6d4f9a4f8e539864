import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Content, Flex, FlexItem, PageSection, Title } from '@patternfly/react-core';
export function PageHeader({ title, description, actions }) {
    return (_jsx(PageSection, { children: _jsxs(Flex, { justifyContent: { default: 'justifyContentSpaceBetween' }, alignItems: { default: 'alignItemsFlexStart' }, children: [_jsxs(FlexItem, { children: [_jsx(Title, { headingLevel: "h1", children: title }), description && _jsx(Content, { component: "p", children: description })] }), actions && _jsx(FlexItem, { children: actions })] }) }));
}
