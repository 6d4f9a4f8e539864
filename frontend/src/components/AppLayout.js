import { jsx as _jsx, jsxs as _jsxs } from "react/jsx-runtime";
import { Button, Flex, FlexItem, Label, Masthead, MastheadBrand, MastheadContent, MastheadLogo, MastheadMain, MastheadToggle, Nav, NavItem, NavList, Page, PageContext, PageSidebar, PageSidebarBody, PageToggleButton, SkipToContent, } from '@patternfly/react-core';
import { BarsIcon } from '@patternfly/react-icons/dist/esm/icons/bars-icon';
import { useContext, useEffect } from 'react';
import { Link, useLocation, useNavigate } from 'react-router';
import { notifyUnauthorized, storedTokenExpired } from '../api/client';
import { useHealth } from '../api/queries';
import { useAuth } from '../auth/AuthContext';
import { MetricsHistoryProvider } from '../hooks/MetricsHistory';
import { useFollowLeader } from '../hooks/useFollowLeader';
import { useLiveInstances } from '../hooks/useLiveInstances';
import { markOnce } from '../lib/perf';
const NAV = [
    ['/', 'Dashboard'],
    ['/models', 'Models'],
    ['/catalog', 'Catalog'],
    ['/logs', 'Logs'],
    ['/charts', 'Metrics'],
    ['/benchmarks', 'Benchmarks'],
    ['/profiles', 'Memory profiles'],
    ['/requests', 'Requests'],
    ['/audit', 'Audit log'],
    ['/cluster', 'Cluster'],
    ['/presets', 'Presets'],
    ['/about', 'About'],
];
function HomeLink(props) {
    return _jsx(Link, { ...props, to: "/" });
}
function isCurrent(path, pathname) {
    return path === '/' ? pathname === '/' : pathname === path || pathname.startsWith(`${path}/`);
}
function UserArea() {
    const { me, config, logout } = useAuth();
    const health = useHealth();
    return (_jsxs(Flex, { className: "sz-user-area", alignItems: { default: 'alignItemsCenter' }, spaceItems: { default: 'spaceItemsSm' }, flexWrap: { default: 'wrap' }, children: [health.data?.mode === 'demo' && (_jsx(FlexItem, { children: _jsx(Label, { color: "yellow", isCompact: true, children: "Demo: simulated GPUs and engines" }) })), me && (_jsx(FlexItem, { children: _jsxs(Label, { color: me.role === 'admin' ? 'blue' : 'grey', isCompact: true, "data-role": me.role ?? 'none', children: [me.subject, " \u00B7 ", me.role === 'admin-readonly' ? 'read-only' : (me.role ?? 'no role')] }) })), config.authEnabled && (_jsx(FlexItem, { children: _jsx(Button, { variant: "link", isInline: true, onClick: logout, children: "Log out" }) }))] }));
}
/** The sections; on a narrow window the sidebar closes once one is chosen. */
function SectionNav() {
    const { pathname } = useLocation();
    // A page may show cached data without asking the server: an expired token is noticed
    // on the next navigation rather than on the next poll.
    useEffect(() => {
        if (storedTokenExpired())
            notifyUnauthorized();
    }, [pathname]);
    const navigate = useNavigate();
    const page = useContext(PageContext);
    const go = (path) => {
        void navigate(path);
        if (page.isMobile && page.isSidebarOpen)
            page.onSidebarToggle();
    };
    return (_jsx(Nav, { "aria-label": "Sections", children: _jsx(NavList, { children: NAV.map(([path, label]) => (_jsx(NavItem, { to: path, isActive: isCurrent(path, pathname), preventDefault: true, onClick: () => go(path), children: label }, path))) }) }));
}
export function AppLayout({ children }) {
    useLiveInstances();
    useFollowLeader();
    useEffect(() => markOnce('sardeenz:shell-ready'), []);
    const masthead = (_jsxs(Masthead, { display: { default: 'inline' }, children: [_jsxs(MastheadMain, { children: [_jsx(MastheadToggle, { children: _jsx(PageToggleButton, { isHamburgerButton: true, "aria-label": "Main navigation", children: _jsx(BarsIcon, {}) }) }), _jsx(MastheadBrand, { children: _jsx(MastheadLogo, { component: HomeLink, children: _jsx("strong", { className: "sz-brand", children: "Sardeenz" }) }) })] }), _jsx(MastheadContent, { children: _jsx(UserArea, {}) })] }));
    const sidebar = (_jsx(PageSidebar, { children: _jsx(PageSidebarBody, { children: _jsx(SectionNav, {}) }) }));
    return (_jsx(Page, { masthead: masthead, sidebar: sidebar, isManagedSidebar: true, skipToContent: _jsx(SkipToContent, { href: "#main", children: "Skip to content" }), mainContainerId: "main", children: _jsx(MetricsHistoryProvider, { children: children }) }));
}
