import {
  Alert,
  Button,
  Card,
  CardBody,
  FormSelect,
  FormSelectOption,
  Label,
  PageSection,
  SearchInput,
  Switch,
  Toolbar,
  ToolbarContent,
  ToolbarItem,
} from '@patternfly/react-core';
import { useCallback, useEffect, useRef, useState } from 'react';
import { useNavigate, useParams } from 'react-router';
import { useInstances } from '../api/queries';
import { useNotify } from '../components/Notifications';
import { PageHeader } from '../components/PageHeader';
import { Empty, ErrorState, Loading } from '../components/States';
import { useEventStream, type StreamState } from '../hooks/useEventStream';
import { copyText } from '../lib/clipboard';
import { appendCapped, filterLines, linesToText, type LogLine } from '../lib/logs';
import './LogsPage.css';

const STATE_LABEL: Record<StreamState, [text: string, color: 'green' | 'blue' | 'grey' | 'red']> = {
  connecting: ['connecting…', 'blue'],
  open: ['live', 'green'],
  ended: ['ended: the instance was unloaded', 'grey'],
  error: ['disconnected: retrying', 'red'],
};

function LogStream({ instanceId }: { instanceId: string }) {
  const [lines, setLines] = useState<LogLine[]>([]);
  const [paused, setPaused] = useState(false);
  const [follow, setFollow] = useState(true);
  const [filter, setFilter] = useState('');
  const [heldCount, setHeldCount] = useState(0);
  /** Set when the instance's pod stopped answering (a relayed stream's last event). */
  const [podGone, setPodGone] = useState<string | null>(null);
  const held = useRef<LogLine[]>([]);
  const pausedRef = useRef(paused);
  const counter = useRef(0);
  const view = useRef<HTMLDivElement>(null);
  const notify = useNotify();

  useEffect(() => {
    pausedRef.current = paused;
    if (!paused && held.current.length > 0) {
      const more = held.current;
      held.current = [];
      setHeldCount(0);
      setLines((l) => appendCapped(l, more));
    }
  }, [paused]);

  const push = useCallback((line: Omit<LogLine, 'n'>) => {
    const entry = { ...line, n: counter.current++ };
    if (pausedRef.current) {
      held.current.push(entry);
      setHeldCount(held.current.length);
    } else setLines((l) => appendCapped(l, [entry]));
  }, []);

  const stream = useEventStream(
    `/api/v1/models/instances/${encodeURIComponent(instanceId)}/events?replay=true`,
    {
      // Every (re)connection replays the buffered log: start from a clean slate.
      onOpen: () => {
        held.current = [];
        setHeldCount(0);
        setLines([]);
        setPodGone(null);
      },
      onMessage: ({ event, data }) => {
        const payload = JSON.parse(data) as {
          line?: string;
          status?: string;
          errorMessage?: string | null;
          detail?: string;
        };
        if (event === 'log' && payload.line !== undefined) push({ text: payload.line, kind: 'log' });
        else if (event === 'unavailable') {
          // The stream of an instance on another pod, relayed: that pod died or fell silent.
          setPodGone(payload.detail ?? 'its pod stopped answering');
          push({ text: `── ${payload.detail ?? 'its pod stopped answering'} ──`, kind: 'status' });
        }
        else if (event === 'status' || event === 'removed') {
          const why = payload.errorMessage ? `: ${payload.errorMessage}` : '';
          push({ text: `── ${payload.status ?? event}${why} ──`, kind: 'status' });
        }
      },
    },
    false,
  );

  const shown = filterLines(lines, filter);
  const autoTop = useRef(0);
  useEffect(() => {
    const el = view.current;
    if (follow && el) {
      el.scrollTop = el.scrollHeight;
      autoTop.current = el.scrollTop;
    }
  }, [shown.lines.length, follow]);

  // Scrolling up stops following; scrolling back to the bottom follows again.
  const onScroll = (): void => {
    const el = view.current;
    if (!el) return;
    if (el.scrollTop < autoTop.current - 2) setFollow(false);
    else if (el.scrollHeight - el.scrollTop - el.clientHeight < 4) setFollow(true);
    autoTop.current = Math.min(autoTop.current, el.scrollTop);
  };
  const copy = (): void => {
    copyText(linesToText(shown.lines)).then(
      () => notify('success', `Copied ${shown.lines.length} line(s)`),
      () => notify('danger', 'The browser refused the clipboard', 'Select the lines and copy them by hand.'),
    );
  };
  const [stateText, stateColor] =
    podGone !== null && stream.state === 'ended'
      ? (['ended: its pod stopped answering', 'red'] as const)
      : STATE_LABEL[stream.state];

  return (
    <>
      <Toolbar>
        <ToolbarContent>
          <ToolbarItem>
            <SearchInput
              aria-label="Filter lines"
              placeholder="Filter (text or /regex/)"
              value={filter}
              onChange={(_e, v) => setFilter(v)}
              onClear={() => setFilter('')}
            />
          </ToolbarItem>
          <ToolbarItem alignItems="center">
            <Switch id="log-follow" label="Follow" isChecked={follow} onChange={(_e, v) => setFollow(v)} />
          </ToolbarItem>
          <ToolbarItem>
            <Button variant="secondary" onClick={() => setPaused((p) => !p)}>
              {paused ? `Resume (${heldCount} new)` : 'Pause'}
            </Button>
          </ToolbarItem>
          <ToolbarItem>
            <Button variant="secondary" onClick={copy} isDisabled={shown.lines.length === 0}>
              Copy
            </Button>
          </ToolbarItem>
          <ToolbarItem>
            <Button variant="link" onClick={() => setLines([])}>
              Clear
            </Button>
          </ToolbarItem>
          <ToolbarItem alignItems="center">
            <Label color={stateColor} isCompact data-testid="stream-state" data-state={stream.state}>
              {stateText}
            </Label>
          </ToolbarItem>
          <ToolbarItem alignItems="center">
            <span data-testid="line-count">
              {shown.lines.length === lines.length ? lines.length : `${shown.lines.length} of ${lines.length}`} lines
            </span>
          </ToolbarItem>
        </ToolbarContent>
      </Toolbar>
      {shown.error && <Alert isInline isPlain variant="warning" title={`Invalid filter: ${shown.error}`} />}
      {stream.error && stream.state === 'error' && (
        <Alert isInline isPlain variant="danger" title={`Log stream: ${stream.error}`} />
      )}
      <div ref={view} className="sz-log" role="log" aria-label="Engine log" onScroll={onScroll} tabIndex={0}>
        {shown.lines.map((l) => (
          <div key={l.n} className={l.kind === 'status' ? 'sz-log__line sz-log__line--status' : 'sz-log__line'}>
            {l.text}
          </div>
        ))}
      </div>
    </>
  );
}

export default function LogsPage() {
  const { id } = useParams();
  const navigate = useNavigate();
  const instances = useInstances();
  const list = instances.data ?? [];
  const firstId = list[0]?.id;

  useEffect(() => {
    if (!id && firstId) void navigate(`/logs/${firstId}`, { replace: true });
  }, [id, firstId, navigate]);

  let body;
  if (instances.isPending) body = <Loading what="instances" />;
  else if (instances.isError) body = <ErrorState what="instances" error={instances.error} onRetry={() => void instances.refetch()} />;
  else if (list.length === 0 && !id) body = <Empty title="No instances">Load a model; its engine log streams here.</Empty>;
  else if (id) body = <LogStream key={id} instanceId={id} />;

  return (
    <>
      <PageHeader title="Logs" description="Each engine's stdout and stderr, live; the buffered log is replayed first." />
      <PageSection>
        <Card>
          <CardBody>
            {list.length > 0 && (
              <FormSelect
                id="log-instance"
                aria-label="Instance"
                value={id ?? ''}
                onChange={(_e, v) => void navigate(`/logs/${v}`)}
                className="sz-mb-md"
              >
                {id && !list.some((i) => i.id === id) && <FormSelectOption value={id} label={`${id} (unloaded)`} />}
                {list.map((i) => (
                  <FormSelectOption key={i.id} value={i.id} label={`${i.servedModelName} · ${i.id} · ${i.status}`} />
                ))}
              </FormSelect>
            )}
            {body}
          </CardBody>
        </Card>
      </PageSection>
    </>
  );
}
