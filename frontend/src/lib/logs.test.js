import { describe, expect, it } from 'vitest';
import { appendCapped, filterLines, linesToText } from './logs';
const lines = (...texts) => texts.map((text, n) => ({ n, text, kind: 'log' }));
describe('log buffer', () => {
    it('keeps the newest lines up to the cap', () => {
        const out = appendCapped(lines('a', 'b'), lines('c', 'd', 'e'), 3);
        expect(out.map((l) => l.text)).toEqual(['c', 'd', 'e']);
    });
    it('filters by text, case-insensitively, or by /regex/', () => {
        const all = lines('INFO start', 'ERROR boom', 'info done');
        expect(filterLines(all, 'info').lines.map((l) => l.text)).toEqual(['INFO start', 'info done']);
        expect(filterLines(all, '/^ERROR/').lines.map((l) => l.text)).toEqual(['ERROR boom']);
        expect(filterLines(all, '/^error/i').lines).toHaveLength(1);
        expect(filterLines(all, '  ').lines).toHaveLength(3);
    });
    it('reports an invalid expression instead of throwing', () => {
        const out = filterLines(lines('x'), '/(/');
        expect(out.lines).toEqual([]);
        expect(out.error).toBeTruthy();
    });
    it('copies lines as text', () => {
        expect(linesToText(lines('a', 'b'))).toBe('a\nb');
    });
});
