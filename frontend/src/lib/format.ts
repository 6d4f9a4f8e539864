// Formatting of sizes, durations and numbers for the dashboard.

const GIB = 2 ** 30;
const MIB = 2 ** 20;
const KIB = 2 ** 10;

/** Bytes in binary units, as GPU tools print them: "23.5 GiB", "512 MiB". Memory is read
 * in GiB with one decimal everywhere (the server's messages say it the same way). */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes == null || !Number.isFinite(bytes)) return '—';
  const sign = bytes < 0 ? '-' : '';
  const abs = Math.abs(bytes);
  if (abs >= 1024 * GIB) return `${sign}${trim(abs / (1024 * GIB), 2)} TiB`;
  if (abs >= GIB) return `${sign}${trim(abs / GIB, abs >= 100 * GIB ? 0 : 1)} GiB`;
  if (abs >= MIB) return `${sign}${trim(abs / MIB, 0)} MiB`;
  if (abs >= KIB) return `${sign}${trim(abs / KIB, 0)} KiB`;
  return `${sign}${abs} B`;
}

/** Bytes in decimal GB ("93.1 GB" is 93.1e9 bytes): only beside a GPU memory limit, which the
 * API takes in GB (the seed's `gpuMemoryLimit`), so the figures next to it need no converting. */
export function formatGB(bytes: number | null | undefined): string {
  if (bytes == null || !Number.isFinite(bytes)) return '—';
  return `${trim(bytes / 1e9, 1)} GB`;
}

/** A GiB figure from the engine's log ("2.1 GiB"); "—" when the engine did not say. */
export function formatGiB(gib: number | null | undefined): string {
  if (gib == null || !Number.isFinite(gib)) return '—';
  return `${trim(gib, gib >= 100 ? 0 : 1)} GiB`;
}

/** Seconds as a compact duration: "850 ms", "12.3 s", "4m 05s", "3h 02m", "2d 4h". */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds == null || !Number.isFinite(seconds) || seconds < 0) return '—';
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${trim(seconds, seconds < 10 ? 1 : 0)} s`;
  const s = Math.floor(seconds);
  const days = Math.floor(s / 86400);
  const hours = Math.floor((s % 86400) / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  const secs = s % 60;
  if (days > 0) return `${days}d ${hours}h`;
  if (hours > 0) return `${hours}h ${pad(minutes)}m`;
  return `${minutes}m ${pad(secs)}s`;
}

/** Milliseconds for latency figures: "0.42 ms", "38 ms", "1.25 s". */
export function formatMs(ms: number | null | undefined): string {
  if (ms == null || !Number.isFinite(ms)) return '—';
  if (ms >= 1000) return `${trim(ms / 1000, 2)} s`;
  if (ms >= 10) return `${Math.round(ms)} ms`;
  return `${trim(ms, 2)} ms`;
}

/** Time since an ISO timestamp, as a duration; "—" without a start. */
export function formatUptime(since: string | null | undefined, now: number): string {
  if (!since) return '—';
  const started = Date.parse(since);
  if (Number.isNaN(started)) return '—';
  return formatDuration(Math.max(0, (now - started) / 1000));
}

/** A local date and time, to the second: "2026-12-03 17:58:04". */
export function formatTimestamp(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '—';
  // Year first, as the CLI prints dates ("2026-12-03 17:58"): one form to search for,
  // whatever the browser's locale would make of it ("12/3/2026", "03.12.2026").
  const date = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  return `${date} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** A rate or count with sensible precision: 0, 0.25, 3.4, 1,234. */
export function formatNumber(value: number | null | undefined, digits = 2): string {
  if (value == null || !Number.isFinite(value)) return '—';
  if (Math.abs(value) >= 1000) return Math.round(value).toLocaleString('en-US');
  if (Math.abs(value) >= 100) return trim(value, 0);
  if (Math.abs(value) >= 10) return trim(value, Math.min(1, digits));
  return trim(value, digits);
}

function trim(value: number, digits: number): string {
  return Number(value.toFixed(digits)).toString();
}

function pad(n: number): string {
  return n.toString().padStart(2, '0');
}
