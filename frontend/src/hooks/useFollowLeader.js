import { useEffect } from 'react';
import { useClusterStatus } from '../api/queries';
import { followLeader } from '../api/leader';
/** Whether the pod serving the dashboard follows a leader it can reach: its admin calls
 *  would then be redirected, so the page belongs on the leader. */
export function followsReachableLeader(s) {
    if (!s || s.mode === 'single' || !s.leader || !s.podId || s.leader === s.podId)
        return false;
    return s.pods.some((p) => p.id === s.leader && p.state !== 'unavailable');
}
/**
 * Moves the dashboard to the leader as soon as this pod's own (local) cluster status
 * says it follows, on every page: pages that only read local paths (the Cluster page,
 * health) would otherwise never see a redirect. Admin calls that do get one move the
 * page the same way (client.ts).
 */
export function useFollowLeader() {
    const { data } = useClusterStatus();
    const follows = followsReachableLeader(data);
    useEffect(() => {
        if (follows)
            followLeader();
    }, [follows, data?.leader]);
}
