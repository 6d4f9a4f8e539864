// Series colours: PatternFly chart tokens, with their values as fallbacks.
const COLORS = [
    ['--pf-t--chart--color--blue--300', '#0066cc'],
    ['--pf-t--chart--color--green--300', '#4cb140'],
    ['--pf-t--chart--color--purple--300', '#5e40be'],
    ['--pf-t--chart--color--orange--300', '#f0561d'],
    ['--pf-t--chart--color--teal--300', '#009596'],
    ['--pf-t--chart--color--yellow--300', '#f4c145'],
    ['--pf-t--chart--color--red--300', '#c9190b'],
    ['--pf-t--chart--color--black--300', '#6a6e73'],
];
/** A CSS colour for the i-th series (cycles). */
export function seriesColor(i) {
    const [token, fallback] = COLORS[((i % COLORS.length) + COLORS.length) % COLORS.length] ?? COLORS[0];
    return `var(${token}, ${fallback})`;
}
/** The same colour resolved to a value, for canvas drawing (no CSS variables there). */
export function resolvedColor(i) {
    const [token, fallback] = COLORS[((i % COLORS.length) + COLORS.length) % COLORS.length] ?? COLORS[0];
    const value = getComputedStyle(document.documentElement).getPropertyValue(token).trim();
    return value || fallback;
}
