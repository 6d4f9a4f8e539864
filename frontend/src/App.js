import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Bullseye, EmptyState, EmptyStateBody, Spinner } from '@patternfly/react-core';
import { lazy, Suspense } from 'react';
import { Link, Route, Routes, useLocation } from 'react-router';
import { useAuth } from './auth/AuthContext';
import { LoginPage } from './auth/LoginPage';
import { OidcCallback } from './auth/OidcCallback';
import { AppLayout } from './components/AppLayout';
import { ErrorState } from './components/States';
import { DashboardPage } from './pages/DashboardPage';
// The dashboard is the landing page and ships in the first chunk; the others load on demand.
const ModelsPage = lazy(() => import('./pages/ModelsPage'));
const InstancePage = lazy(() => import('./pages/InstancePage'));
const LogsPage = lazy(() => import('./pages/LogsPage'));
const MetricsPage = lazy(() => import('./pages/MetricsPage'));
const BenchmarksPage = lazy(() => import('./pages/BenchmarksPage'));
const BenchmarkNewPage = lazy(() => import('./pages/BenchmarkNewPage'));
const BenchmarkRunPage = lazy(() => import('./pages/BenchmarkRunPage'));
const BenchmarkComparePage = lazy(() => import('./pages/BenchmarkComparePage'));
const ProfilesPage = lazy(() => import('./pages/ProfilesPage'));
const AuditPage = lazy(() => import('./pages/AuditPage'));
const RequestsPage = lazy(() => import('./pages/RequestsPage'));
const AboutPage = lazy(() => import('./pages/AboutPage'));
const ClusterPage = lazy(() => import('./pages/ClusterPage'));
const PresetsPage = lazy(() => import('./pages/PresetsPage'));
const CatalogPage = lazy(() => import('./pages/CatalogPage'));
function PageSpinner() {
    return (_jsx(Bullseye, { className: "sz-p-xl", children: _jsx(Spinner, { "aria-label": "Loading page" }) }));
}
function NotFound() {
    const { pathname } = useLocation();
    return (_jsx(EmptyState, { titleText: "No such page", headingLevel: "h1", children: _jsxs(EmptyStateBody, { children: ["Nothing lives at ", _jsx("code", { children: pathname }), ". ", _jsx(Link, { to: "/", children: "Go to the dashboard" }), "."] }) }));
}
export function App() {
    const auth = useAuth();
    const { pathname } = useLocation();
    if (pathname === '/auth/callback')
        return _jsx(OidcCallback, {});
    if (auth.status === 'loading')
        return _jsx(PageSpinner, {});
    if (auth.status === 'error')
        return _jsx(ErrorState, { what: "the server's login settings", error: auth.error, onRetry: auth.retry });
    if (auth.status === 'login')
        return _jsx(LoginPage, {});
    return (_jsx(AppLayout, { children: _jsx(Suspense, { fallback: _jsx(PageSpinner, {}), children: _jsxs(Routes, { children: [_jsx(Route, { path: "/", element: _jsx(DashboardPage, {}) }), _jsx(Route, { path: "/models", element: _jsx(ModelsPage, {}) }), _jsx(Route, { path: "/models/:id", element: _jsx(InstancePage, {}) }), _jsx(Route, { path: "/logs", element: _jsx(LogsPage, {}) }), _jsx(Route, { path: "/logs/:id", element: _jsx(LogsPage, {}) }), _jsx(Route, { path: "/charts", element: _jsx(MetricsPage, {}) }), _jsx(Route, { path: "/benchmarks", element: _jsx(BenchmarksPage, {}) }), _jsx(Route, { path: "/benchmarks/new", element: _jsx(BenchmarkNewPage, {}) }), _jsx(Route, { path: "/benchmarks/compare", element: _jsx(BenchmarkComparePage, {}) }), _jsx(Route, { path: "/benchmarks/:id", element: _jsx(BenchmarkRunPage, {}) }), _jsx(Route, { path: "/profiles", element: _jsx(ProfilesPage, {}) }), _jsx(Route, { path: "/requests", element: _jsx(RequestsPage, {}) }), _jsx(Route, { path: "/audit", element: _jsx(AuditPage, {}) }), _jsx(Route, { path: "/cluster", element: _jsx(ClusterPage, {}) }), _jsx(Route, { path: "/presets", element: _jsx(PresetsPage, {}) }), _jsx(Route, { path: "/about", element: _jsx(AboutPage, {}) }), _jsx(Route, { path: "/catalog", element: _jsx(CatalogPage, {}) }), _jsx(Route, { path: "*", element: _jsx(NotFound, {}) })] }) }) }));
}
