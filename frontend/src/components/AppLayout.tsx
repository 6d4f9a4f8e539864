import {
  Button,
  Flex,
  FlexItem,
  Label,
  Masthead,
  MastheadBrand,
  MastheadContent,
  MastheadLogo,
  MastheadMain,
  MastheadToggle,
  Nav,
  NavItem,
  NavList,
  Page,
  PageContext,
  PageSidebar,
  PageSidebarBody,
  PageToggleButton,
  SkipToContent,
} from '@patternfly/react-core';
import { BarsIcon } from '@patternfly/react-icons/dist/esm/icons/bars-icon';
import { useContext, useEffect, type AnchorHTMLAttributes, type ReactNode } from 'react';
import { Link, useLocation, useNavigate } from 'react-router';
import { notifyUnauthorized, storedTokenExpired } from '../api/client';
import { useHealth } from '../api/queries';
import { useAuth } from '../auth/AuthContext';
import { MetricsHistoryProvider } from '../hooks/MetricsHistory';
import { useFollowLeader } from '../hooks/useFollowLeader';
import { useLiveInstances } from '../hooks/useLiveInstances';
import { markOnce } from '../lib/perf';

const NAV: Array<[path: string, label: string]> = [
  ['/', 'Dashboard'],
  ['/models', 'Models'],
  ['/catalog', 'Catalog'],
  ['/logs', 'Logs'],
  ['/charts', 'Metrics'],
  ['/benchmarks', 'Benchmarks'],
  ['/profiles', 'Memory profiles'],
  ['/requests', 'Requests'],
  ['/tenants', 'Tenants'],
  ['/audit', 'Audit log'],
  ['/cluster', 'Cluster'],
  ['/presets', 'Presets'],
  ['/about', 'About'],
];

function HomeLink(props: AnchorHTMLAttributes<HTMLAnchorElement>) {
  return <Link {...props} to="/" />;
}

function isCurrent(path: string, pathname: string): boolean {
  return path === '/' ? pathname === '/' : pathname === path || pathname.startsWith(`${path}/`);
}

function UserArea() {
  const { me, config, logout } = useAuth();
  const health = useHealth();
  return (
    <Flex
      className="sz-user-area"
      alignItems={{ default: 'alignItemsCenter' }}
      spaceItems={{ default: 'spaceItemsSm' }}
      flexWrap={{ default: 'wrap' }}
    >
      {health.data?.mode === 'demo' && (
        <FlexItem>
          <Label color="yellow" isCompact>
            Demo: simulated GPUs and engines
          </Label>
        </FlexItem>
      )}
      {me && (
        <FlexItem>
          <Label color={me.role === 'admin' ? 'blue' : 'grey'} isCompact data-role={me.role ?? 'none'}>
            {me.subject} · {me.role === 'admin-readonly' ? 'read-only' : (me.role ?? 'no role')}
          </Label>
        </FlexItem>
      )}
      {config.authEnabled && (
        <FlexItem>
          <Button variant="link" isInline onClick={logout}>
            Log out
          </Button>
        </FlexItem>
      )}
    </Flex>
  );
}

/** The sections; on a narrow window the sidebar closes once one is chosen. */
function SectionNav() {
  const { pathname } = useLocation();
  // A page may show cached data without asking the server: an expired token is noticed
  // on the next navigation rather than on the next poll.
  useEffect(() => {
    if (storedTokenExpired()) notifyUnauthorized();
  }, [pathname]);
  const navigate = useNavigate();
  const page = useContext(PageContext);
  const go = (path: string): void => {
    void navigate(path);
    if (page.isMobile && page.isSidebarOpen) page.onSidebarToggle();
  };
  return (
    <Nav aria-label="Sections">
      <NavList>
        {NAV.map(([path, label]) => (
          <NavItem key={path} to={path} isActive={isCurrent(path, pathname)} preventDefault onClick={() => go(path)}>
            {label}
          </NavItem>
        ))}
      </NavList>
    </Nav>
  );
}

export function AppLayout({ children }: { children: ReactNode }) {
  useLiveInstances();
  useFollowLeader();
  useEffect(() => markOnce('sardeenz:shell-ready'), []);

  const masthead = (
    <Masthead display={{ default: 'inline' }}>
      <MastheadMain>
        <MastheadToggle>
          <PageToggleButton isHamburgerButton aria-label="Main navigation">
            <BarsIcon />
          </PageToggleButton>
        </MastheadToggle>
        <MastheadBrand>
          <MastheadLogo component={HomeLink}>
            <strong className="sz-brand">Sardeenz</strong>
          </MastheadLogo>
        </MastheadBrand>
      </MastheadMain>
      <MastheadContent>
        <UserArea />
      </MastheadContent>
    </Masthead>
  );

  const sidebar = (
    <PageSidebar>
      <PageSidebarBody>
        <SectionNav />
      </PageSidebarBody>
    </PageSidebar>
  );

  return (
    <Page
      masthead={masthead}
      sidebar={sidebar}
      isManagedSidebar
      skipToContent={<SkipToContent href="#main">Skip to content</SkipToContent>}
      mainContainerId="main"
    >
      <MetricsHistoryProvider>{children}</MetricsHistoryProvider>
    </Page>
  );
}
