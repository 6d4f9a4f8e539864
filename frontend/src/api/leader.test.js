// @vitest-environment happy-dom
import { afterEach, describe, expect, it, vi } from 'vitest';
import { api, onLeaderRedirect } from './client';
import { followLeader, MIN_RELOAD_INTERVAL_MS, reloadInterval } from './leader';
import { followsReachableLeader } from '../hooks/useFollowLeader';
import { staticCluster } from '../lib/clusterFixture';
import { readEvents } from './sse';
afterEach(() => {
    vi.unstubAllGlobals();
    sessionStorage.clear();
});
/** What fetch() with redirect: 'manual' gives for a 307: an opaque response. */
function opaqueRedirect() {
    return { type: 'opaqueredirect', status: 0, ok: false, headers: new Headers() };
}
describe("a follower's redirect to the leader", () => {
    it('is not followed by fetch: the client asks for it manually and reports it', async () => {
        const fetchMock = vi.fn(async (_path, _init) => opaqueRedirect());
        vi.stubGlobal('fetch', fetchMock);
        const moved = vi.fn();
        const off = onLeaderRedirect(moved);
        try {
            await expect(api('/api/v1/models/load', { method: 'POST', body: { modelPath: 'm' } })).rejects.toMatchObject({
                status: 307,
                code: 'leader_redirect',
            });
        }
        finally {
            off();
        }
        expect(fetchMock.mock.calls[0]?.[1]?.redirect).toBe('manual');
        expect(moved).toHaveBeenCalledTimes(1);
    });
    it('is reported by the event stream too', async () => {
        vi.stubGlobal('fetch', vi.fn(async () => opaqueRedirect()));
        const moved = vi.fn();
        const off = onLeaderRedirect(moved);
        try {
            await expect(readEvents('/api/v1/events', () => undefined, new AbortController().signal)).rejects.toMatchObject({
                code: 'leader_redirect',
            });
        }
        finally {
            off();
        }
        expect(moved).toHaveBeenCalledTimes(1);
    });
    it('leaves ordinary answers alone', async () => {
        vi.stubGlobal('fetch', vi.fn(async () => new Response('[]', { status: 200, headers: { 'content-type': 'application/json' } })));
        const moved = vi.fn();
        const off = onLeaderRedirect(moved);
        try {
            await expect(api('/api/v1/models')).resolves.toEqual([]);
        }
        finally {
            off();
        }
        expect(moved).not.toHaveBeenCalled();
    });
});
describe('followLeader', () => {
    it('reloads the page (the browser then follows the 307), backing off when it stays', () => {
        const page = { reload: vi.fn() };
        const t0 = 1_000_000;
        expect(followLeader(t0, page, sessionStorage)).toBe(true);
        expect(followLeader(t0 + 10, page, sessionStorage)).toBe(false); // a burst of failing calls
        expect(followLeader(t0 + MIN_RELOAD_INTERVAL_MS - 1, page, sessionStorage)).toBe(false);
        expect(page.reload).toHaveBeenCalledTimes(1);
        const t1 = t0 + MIN_RELOAD_INTERVAL_MS;
        expect(followLeader(t1, page, sessionStorage)).toBe(true);
        // Still here after a reload (no leader to reach, or a proxy): twice as long.
        expect(reloadInterval(2)).toBe(2 * MIN_RELOAD_INTERVAL_MS);
        expect(followLeader(t1 + 2 * MIN_RELOAD_INTERVAL_MS - 1, page, sessionStorage)).toBe(false);
        expect(followLeader(t1 + 2 * MIN_RELOAD_INTERVAL_MS, page, sessionStorage)).toBe(true);
        expect(page.reload).toHaveBeenCalledTimes(3);
        expect(reloadInterval(50)).toBe(5 * 60_000); // capped
    });
    it('starts over after quiet minutes, and when the clock was set back', () => {
        const page = { reload: vi.fn() };
        sessionStorage.setItem('sardeenz.leaderReloads', JSON.stringify({ at: 0, count: 9 }));
        expect(followLeader(10 * 60_000, page, sessionStorage)).toBe(true);
        expect(JSON.parse(sessionStorage.getItem('sardeenz.leaderReloads') ?? '{}')).toEqual({ at: 10 * 60_000, count: 1 });
        sessionStorage.setItem('sardeenz.leaderReloads', JSON.stringify({ at: 9e15, count: 3 }));
        expect(followLeader(1000, page, sessionStorage)).toBe(true);
        sessionStorage.setItem('sardeenz.leaderReloads', 'not json');
        expect(followLeader(2000, page, sessionStorage)).toBe(true);
        expect(page.reload).toHaveBeenCalledTimes(3);
    });
});
describe('followsReachableLeader', () => {
    it('is true only on a follower whose leader is reachable', () => {
        const s = staticCluster(); // answered by pod-b, leader pod-a (healthy)
        expect(followsReachableLeader(s)).toBe(true);
        expect(followsReachableLeader({ ...s, podId: 'pod-a' })).toBe(false); // the leader itself
        expect(followsReachableLeader({ ...s, leader: null })).toBe(false); // an election: stay
        expect(followsReachableLeader({ ...s, leader: 'pod-c' })).toBe(false); // unavailable
        expect(followsReachableLeader({ ...s, mode: 'single' })).toBe(false);
        expect(followsReachableLeader(undefined)).toBe(false);
    });
});
