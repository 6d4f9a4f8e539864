import { describe, expect, it } from 'vitest';
import { SseParser } from './sse';
describe('SseParser', () => {
    it('parses named events with JSON data', () => {
        const p = new SseParser();
        expect(p.push('event: log\ndata: {"line":"a"}\n\nevent: status\ndata: {}\n\n')).toEqual([
            { event: 'log', data: '{"line":"a"}' },
            { event: 'status', data: '{}' },
        ]);
    });
    it('reassembles messages split across chunks, including a split CRLF', () => {
        const p = new SseParser();
        expect(p.push('event: lo')).toEqual([]);
        expect(p.push('g\r\ndata: x\r')).toEqual([]);
        expect(p.push('\n\r\n')).toEqual([{ event: 'log', data: 'x' }]);
    });
    it('joins multi-line data, ignores comments (pings), defaults the event name', () => {
        const p = new SseParser();
        expect(p.push(': ping - 2026\n\ndata: a\ndata: b\n\n')).toEqual([{ event: 'message', data: 'a\nb' }]);
    });
    it('does not leak an event name into the next message', () => {
        const p = new SseParser();
        expect(p.push('event: lonely\n\ndata: z\n\n')).toEqual([{ event: 'message', data: 'z' }]);
    });
});
