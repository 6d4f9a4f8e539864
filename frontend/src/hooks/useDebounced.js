import { useEffect, useState } from 'react';
/** `value`, once it has stopped changing for `delayMs` (compared as JSON). */
export function useDebounced(value, delayMs) {
    const [settled, setSettled] = useState(value);
    const key = JSON.stringify(value);
    useEffect(() => {
        const timer = setTimeout(() => setSettled(JSON.parse(key)), delayMs);
        return () => clearTimeout(timer);
    }, [key, delayMs]);
    return settled;
}
