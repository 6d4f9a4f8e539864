// A fit check's verdict, phrased for the load dialog and the profiles page.

import type { FitVerdict } from '../api/types';
import { formatBytes as formatBinary, formatGB } from './format';

export interface VerdictView {
  variant: 'success' | 'danger' | 'info';
  title: string;
  details: string[];
}

const SOURCES: Record<FitVerdict['source'], string> = {
  profile: 'from a saved memory profile',
  estimate: 'estimated from the model files',
  unknown: 'nothing known about this model',
};

/** `unit`: 'GB' when the request carries a GPU memory limit (typed in GB), so the figures
 * beside it read in the same unit; GiB otherwise, as every other memory figure. */
export function describeVerdict(v: FitVerdict, unit: 'GB' | 'GiB' = 'GiB'): VerdictView {
  const formatBytes = unit === 'GB' ? formatGB : formatBinary;
  // Nothing known about the model but a verdict anyway: it judged the limit asked for.
  const limitOnly = v.source === 'unknown' && v.fits !== null;
  const source =
    v.source === 'profile' && v.profileName
      ? `from profile “${v.profileName}”`
      : limitOnly
        ? 'for the memory limit asked for'
        : SOURCES[v.source];
  const gpuLines = v.gpus
    .filter((g) => g.neededBytes != null)
    .map(
      (g) =>
        `GPU ${g.index} (${g.name}): needs ${formatBytes(g.neededBytes)}, ` +
        `${formatBytes(g.availableBytes)} available after the ${formatBytes(g.reservedBytes)} reserve` +
        (g.fits === false ? ' — too little' : ''),
    );
  const details = [v.reason, ...gpuLines, ...v.notes];
  if (v.fits === true) return { variant: 'success', title: `Fits (${source})`, details };
  if (v.fits === false) return { variant: 'danger', title: `Will not fit (${source})`, details };
  return { variant: 'info', title: `Fit unknown (${source})`, details };
}
