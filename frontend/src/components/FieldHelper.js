import { jsx as _jsx } from "react/jsx-runtime";
import { FormHelperText, HelperText, HelperTextItem } from '@patternfly/react-core';
/** A form field's helper line: its error when it has one, else the hint (if any). */
export function FieldHelper({ error, children }) {
    if (!error && !children)
        return null;
    return (_jsx(FormHelperText, { children: _jsx(HelperText, { children: _jsx(HelperTextItem, { variant: error ? 'error' : 'default', children: error ?? children }) }) }));
}
