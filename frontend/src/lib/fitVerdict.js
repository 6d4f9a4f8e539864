// A fit check's verdict, phrased for the load dialog and the profiles page.
import { formatBytes } from './format';
const SOURCES = {
    profile: 'from a saved memory profile',
    estimate: 'estimated from the model files',
    unknown: 'nothing known about this model',
};
export function describeVerdict(v) {
    const source = v.source === 'profile' && v.profileName ? `from profile “${v.profileName}”` : SOURCES[v.source];
    const gpuLines = v.gpus
        .filter((g) => g.neededBytes != null)
        .map((g) => `GPU ${g.index} (${g.name}): needs ${formatBytes(g.neededBytes)}, ` +
        `${formatBytes(g.availableBytes)} available after the ${formatBytes(g.reservedBytes)} reserve` +
        (g.fits === false ? ' — too little' : ''));
    const details = [v.reason, ...gpuLines, ...v.notes];
    if (v.fits === true)
        return { variant: 'success', title: `Fits (${source})`, details };
    if (v.fits === false)
        return { variant: 'danger', title: `Will not fit (${source})`, details };
    return { variant: 'info', title: `Fit unknown (${source})`, details };
}
