import { Alert, Content, List, ListItem, Spinner } from '@patternfly/react-core';
import { isMissingRoute } from '../api/client';
import type { UseQueryResult } from '@tanstack/react-query';
import type { FitVerdict } from '../api/types';
import { describeVerdict } from '../lib/fitVerdict';

function VerdictAlert({ verdict, unit }: { verdict: FitVerdict; unit: 'GB' | 'GiB' }) {
  const view = describeVerdict(verdict, unit);
  return (
    <Alert isInline isPlain variant={view.variant} title={view.title} data-testid="fit-verdict" data-fits={String(verdict.fits)}>
      <List isPlain>
        {view.details.map((line) => (
          <ListItem key={line}>{line}</ListItem>
        ))}
      </List>
    </Alert>
  );
}

interface Props {
  /** The fit check of the request being typed (`useFitCheck`); idle while there is none. */
  fit: UseQueryResult<FitVerdict, Error>;
  idleText: string;
  /** 'GB' when the request has a GPU memory limit (the field's unit); GiB otherwise. */
  unit?: 'GB' | 'GiB';
}

/** The live answer to "will it fit?". */
export function FitPanel({ fit, idleText, unit = 'GiB' }: Props) {
  if (fit.fetchStatus === 'idle' && fit.isPending) return <Content component="small">{idleText}</Content>;
  if (fit.isFetching && !fit.data) {
    return (
      <Content component="small">
        <Spinner size="sm" aria-label="Checking fit" /> Checking whether it fits…
      </Content>
    );
  }
  if (fit.isError) {
    const text = isMissingRoute(fit.error)
      ? 'This server has no fit check (memory profiles are not available).'
      : `Fit check failed: ${fit.error.message}`;
    return <Alert isInline isPlain variant="warning" title={text} />;
  }
  return fit.data ? <VerdictAlert verdict={fit.data} unit={unit} /> : null;
}
