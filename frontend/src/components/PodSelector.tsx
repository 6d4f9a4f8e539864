import { FormGroup, FormHelperText, FormSelect, FormSelectOption, HelperText, HelperTextItem } from '@patternfly/react-core';
import type { ClusterStatus } from '../api/types';
import { orderedPods } from '../lib/cluster';

/** The load dialog's pod choice (cluster mode only): "any" leaves it to the leader,
 *  a pod id is sent as `podId`. Unavailable pods cannot be chosen. */
export function PodSelector({ status, value, onChange }: { status: ClusterStatus; value: string; onChange: (podId: string) => void }) {
  return (
    <FormGroup label="Pod" fieldId="load-pod">
      <FormSelect id="load-pod" value={value} onChange={(_e, v) => onChange(v)}>
        <FormSelectOption value="" label="Any (scheduler)" />
        {orderedPods(status).map((pod) => (
          <FormSelectOption
            key={pod.id}
            value={pod.id}
            label={`${pod.id}${pod.isLeader ? ' (leader)' : ''} · ${pod.state}`}
            isDisabled={pod.state === 'unavailable'}
          />
        ))}
      </FormSelect>
      <FormHelperText>
        <HelperText>
          <HelperTextItem>Any: the leader places it. A pod: the leader sends the load there; the GPUs below are then that pod’s.</HelperTextItem>
        </HelperText>
      </FormHelperText>
    </FormGroup>
  );
}
