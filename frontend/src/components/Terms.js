import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { DescriptionList, DescriptionListDescription, DescriptionListGroup, DescriptionListTerm, } from '@patternfly/react-core';
/** A compact horizontal term/value list (the cards of the About and instance pages). */
export function Terms({ items }) {
    return (_jsx(DescriptionList, { isHorizontal: true, isCompact: true, children: items.map(([term, value]) => (_jsxs(DescriptionListGroup, { children: [_jsx(DescriptionListTerm, { children: term }), _jsx(DescriptionListDescription, { children: value })] }, term))) }));
}
