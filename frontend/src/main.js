import { jsx as _jsx } from "react/jsx-runtime";
import '@patternfly/react-core/dist/styles/base.css';
import './app.css';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { BrowserRouter } from 'react-router';
import { ApiError, onLeaderRedirect } from './api/client';
import { followLeader } from './api/leader';
import { startEarlyFetches } from './api/prefetch';
import { App } from './App';
import { AuthProvider } from './auth/AuthContext';
import { NotificationProvider } from './components/Notifications';
const queryClient = new QueryClient({
    defaultOptions: {
        queries: {
            // A 4xx will not change by asking again; a dropped connection may.
            retry: (count, error) => !(error instanceof ApiError && error.status >= 400 && error.status < 500) && count < 2,
            staleTime: 2000,
        },
    },
});
// Cluster: a follower redirects admin calls to the leader; move the page there.
onLeaderRedirect(() => void followLeader());
startEarlyFetches(queryClient);
const root = document.getElementById('root');
if (!root)
    throw new Error('index.html has no #root');
createRoot(root).render(_jsx(StrictMode, { children: _jsx(QueryClientProvider, { client: queryClient, children: _jsx(BrowserRouter, { children: _jsx(NotificationProvider, { children: _jsx(AuthProvider, { children: _jsx(App, {}) }) }) }) }) }));
