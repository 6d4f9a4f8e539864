import { describe, expect, it } from 'vitest';
import { formatBytes, formatDuration, formatGiB, formatMs, formatNumber, formatTimestamp, formatUptime } from './format';

describe('formatBytes', () => {
  it.each([
    [0, '0 B'],
    [512, '512 B'],
    [2048, '2 KiB'],
    [3 * 2 ** 20, '3 MiB'],
    [3.5 * 2 ** 30, '3.5 GiB'],
    [24 * 2 ** 30, '24 GiB'],
    [141 * 2 ** 30, '141 GiB'],
    [2 * 2 ** 40, '2 TiB'],
    [-2 * 2 ** 30, '-2 GiB'],
  ])('%d bytes -> %s', (bytes, text) => expect(formatBytes(bytes)).toBe(text));

  it('shows a dash for unknown values', () => {
    expect(formatBytes(null)).toBe('—');
    expect(formatBytes(undefined)).toBe('—');
    expect(formatBytes(Number.NaN)).toBe('—');
  });
});

describe('formatGiB', () => {
  it('keeps two decimals of what the engine logged', () => {
    expect(formatGiB(2.1)).toBe('2.1 GiB');
    expect(formatGiB(0.737)).toBe('0.7 GiB');
    expect(formatGiB(null)).toBe('—');
  });
});

describe('formatDuration', () => {
  it.each([
    [0.0421, '42 ms'],
    [1.25, '1.3 s'],
    [42, '42 s'],
    [65, '1m 05s'],
    [3 * 3600 + 2 * 60 + 9, '3h 02m'],
    [2 * 86400 + 4 * 3600, '2d 4h'],
  ])('%f s -> %s', (s, text) => expect(formatDuration(s)).toBe(text));

  it('refuses negative and missing durations', () => {
    expect(formatDuration(-1)).toBe('—');
    expect(formatDuration(null)).toBe('—');
  });
});

describe('formatUptime', () => {
  it('counts from the start timestamp', () => {
    const now = Date.parse('2026-01-01T01:00:00Z');
    expect(formatUptime('2026-01-01T00:59:30Z', now)).toBe('30 s');
    expect(formatUptime('2026-01-01T00:00:00Z', now)).toBe('1h 00m');
  });

  it('never goes negative (clock skew) and needs a start', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(formatUptime('2026-01-01T00:00:05Z', now)).toBe('0 ms');
    expect(formatUptime(null, now)).toBe('—');
    expect(formatUptime('not a date', now)).toBe('—');
  });
});

describe('numbers', () => {
  it('formats latency in ms or s', () => {
    expect(formatMs(0.42)).toBe('0.42 ms');
    expect(formatMs(38.4)).toBe('38 ms');
    expect(formatMs(1250)).toBe('1.25 s');
  });

  it('formats rates with sensible precision', () => {
    expect(formatNumber(0.25)).toBe('0.25');
    expect(formatNumber(12.34)).toBe('12.3');
    expect(formatNumber(123.4)).toBe('123');
    expect(formatNumber(12345)).toBe('12,345');
  });
});

describe('formatTimestamp', () => {
  it('is year first, to the second, in local time, whatever the locale', () => {
    const d = new Date(2026, 11, 3, 17, 58, 4); // local time: Dec 3rd
    expect(formatTimestamp(d.toISOString())).toBe('2026-12-03 17:58:04');
    expect(formatTimestamp(null)).toBe('—');
    expect(formatTimestamp('not a date')).toBe('—');
  });
});
