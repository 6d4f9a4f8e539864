import { jsx as _jsx } from "react/jsx-runtime";
// @vitest-environment happy-dom
import { cleanup, render, screen } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiError } from '../api/client';
import { FitPanel } from './FitPanel';
afterEach(cleanup);
const fit = (state) => state;
const verdict = {
    modelPath: 'm',
    fits: false,
    source: 'profile',
    reason: 'needs 30 GB, 18 GB available',
    profileId: 'p',
    profileName: 'big',
    maxTokens: 8192,
    tensorParallelSize: 1,
    neededBytesPerGpu: 1,
    reservedBytesPerGpu: 1,
    chosenGpuIds: [],
    gpus: [],
    notes: [],
};
describe('FitPanel', () => {
    it('asks for input while idle', () => {
        render(_jsx(FitPanel, { fit: fit({ fetchStatus: 'idle', isPending: true }), idleText: "Enter a model path." }));
        expect(screen.getByText('Enter a model path.')).toBeTruthy();
    });
    it('shows the verdict with its reason', () => {
        render(_jsx(FitPanel, { fit: fit({ fetchStatus: 'idle', isPending: false, isError: false, data: verdict }), idleText: "" }));
        expect(screen.getByText('Will not fit (from profile “big”)')).toBeTruthy();
        expect(screen.getByText('needs 30 GB, 18 GB available')).toBeTruthy();
        expect(screen.getByTestId('fit-verdict').getAttribute('data-fits')).toBe('false');
    });
    it('explains a server without the fit check', () => {
        const error = new ApiError(404, 'not_found', 'Not Found');
        render(_jsx(FitPanel, { fit: fit({ fetchStatus: 'idle', isPending: false, isError: true, error }), idleText: "" }));
        expect(screen.getByText(/has no fit check/)).toBeTruthy();
    });
});
