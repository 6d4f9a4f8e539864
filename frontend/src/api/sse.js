// Server-sent events over fetch(): unlike EventSource it can send the bearer token.
import { authHeaders, errorFrom, leaderRedirectError } from './client';
/** Incremental parser of the text/event-stream format (WHATWG rules, no `retry`). */
export class SseParser {
    buffer = '';
    event = '';
    data = [];
    push(chunk) {
        this.buffer += chunk;
        const out = [];
        let nl;
        while ((nl = this.buffer.search(/\r\n|\r|\n/)) !== -1) {
            const line = this.buffer.slice(0, nl);
            const sepLength = this.buffer.startsWith('\r\n', nl) ? 2 : 1;
            // A lone \r at the very end may be the first half of \r\n: wait for more.
            if (this.buffer[nl] === '\r' && sepLength === 1 && nl === this.buffer.length - 1)
                break;
            this.buffer = this.buffer.slice(nl + sepLength);
            const message = this.line(line);
            if (message)
                out.push(message);
        }
        return out;
    }
    line(line) {
        if (line === '') {
            if (this.data.length === 0) {
                this.event = '';
                return null;
            }
            const message = { event: this.event || 'message', data: this.data.join('\n') };
            this.event = '';
            this.data = [];
            return message;
        }
        if (line.startsWith(':'))
            return null;
        const colon = line.indexOf(':');
        const field = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? '' : line.slice(colon + 1);
        if (value.startsWith(' '))
            value = value.slice(1);
        if (field === 'event')
            this.event = value;
        else if (field === 'data')
            this.data.push(value);
        return null;
    }
}
/**
 * Reads an SSE stream until it ends or `signal` aborts. Resolves when the
 * server closes the stream; rejects with ApiError on an HTTP error.
 * `method: 'POST'`: a stream that is the answer to an action (a preset's apply),
 * which EventSource could not ask for.
 */
export async function readEvents(path, onMessage, signal, onOpen, method = 'GET') {
    const resp = await fetch(path, {
        method,
        headers: { Accept: 'text/event-stream', ...authHeaders() },
        signal,
        redirect: 'manual', // a follower's 307 to the leader: see client.ts
    });
    const moved = leaderRedirectError(resp);
    if (moved)
        throw moved;
    if (!resp.ok)
        throw await errorFrom(resp);
    onOpen?.();
    if (!resp.body)
        return;
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = new SseParser();
    for (;;) {
        const { value, done } = await reader.read();
        if (done)
            return;
        for (const message of parser.push(value))
            onMessage(message);
    }
}
