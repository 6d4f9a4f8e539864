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
const TenantsPage = lazy(() => import('./pages/TenantsPage'));

function PageSpinner() {
  return (
    <Bullseye className="sz-p-xl">
      <Spinner aria-label="Loading page" />
    </Bullseye>
  );
}

function NotFound() {
  const { pathname } = useLocation();
  return (
    <EmptyState titleText="No such page" headingLevel="h1">
      <EmptyStateBody>
        Nothing lives at <code>{pathname}</code>. <Link to="/">Go to the dashboard</Link>.
      </EmptyStateBody>
    </EmptyState>
  );
}

export function App() {
  const auth = useAuth();
  const { pathname } = useLocation();
  if (pathname === '/auth/callback') return <OidcCallback />;
  if (auth.status === 'loading') return <PageSpinner />;
  if (auth.status === 'error') return <ErrorState what="the server's login settings" error={auth.error} onRetry={auth.retry} />;
  if (auth.status === 'login') return <LoginPage />;
  return (
    <AppLayout>
      <Suspense fallback={<PageSpinner />}>
        <Routes>
          <Route path="/" element={<DashboardPage />} />
          <Route path="/models" element={<ModelsPage />} />
          <Route path="/models/:id" element={<InstancePage />} />
          <Route path="/logs" element={<LogsPage />} />
          <Route path="/logs/:id" element={<LogsPage />} />
          {/* Not /metrics: that path is the Prometheus endpoint. */}
          <Route path="/charts" element={<MetricsPage />} />
          <Route path="/benchmarks" element={<BenchmarksPage />} />
          <Route path="/benchmarks/new" element={<BenchmarkNewPage />} />
          <Route path="/benchmarks/compare" element={<BenchmarkComparePage />} />
          <Route path="/benchmarks/:id" element={<BenchmarkRunPage />} />
          <Route path="/profiles" element={<ProfilesPage />} />
          <Route path="/requests" element={<RequestsPage />} />
          <Route path="/audit" element={<AuditPage />} />
          <Route path="/cluster" element={<ClusterPage />} />
          <Route path="/presets" element={<PresetsPage />} />
          <Route path="/about" element={<AboutPage />} />
          <Route path="/catalog" element={<CatalogPage />} />
          <Route path="/tenants" element={<TenantsPage />} />
          <Route path="*" element={<NotFound />} />
        </Routes>
      </Suspense>
    </AppLayout>
  );
}
