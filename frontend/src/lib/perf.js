// Performance marks the browser test reads (`sardeenz:shell-ready`: navigation and
// layout usable; `sardeenz:dashboard-ready`: the dashboard shows its data).
export function markOnce(name) {
    if (performance.getEntriesByName(name).length === 0)
        performance.mark(name);
}
