// The load dialog's model: form values -> load request, fit question and warnings.
export const EMPTY_LOAD_FORM = {
    modelPath: '',
    servedModelName: '',
    displayName: '',
    engine: 'default',
    gpuIds: [],
    gpuMemoryLimit: '',
    tensorParallelSize: '1',
    enableSleepMode: false,
    extraArgs: '',
};
/**
 * Splits an argument line into argv tokens like a POSIX shell does for words
 * and quotes (no expansion: `$()` and `;` stay literal, as the server wants).
 * Throws on an unterminated quote.
 */
export function splitArgs(line) {
    const out = [];
    let current = '';
    let inToken = false;
    let quote = null;
    for (let i = 0; i < line.length; i += 1) {
        const ch = line.charAt(i);
        if (quote) {
            if (ch === quote)
                quote = null;
            else if (ch === '\\' && quote === '"' && i + 1 < line.length)
                current += line.charAt(++i);
            else
                current += ch;
        }
        else if (ch === '"' || ch === "'") {
            quote = ch;
            inToken = true;
        }
        else if (ch === '\\' && i + 1 < line.length) {
            current += line.charAt(++i);
            inToken = true;
        }
        else if (/\s/.test(ch)) {
            if (inToken)
                out.push(current);
            current = '';
            inToken = false;
        }
        else {
            current += ch;
            inToken = true;
        }
    }
    if (quote)
        throw new Error(`unterminated ${quote} quote`);
    if (inToken)
        out.push(current);
    return out;
}
/** The last value of `--flag V` or `--flag=V` (argparse's rule). */
export function flagValue(args, flag) {
    let value;
    args.forEach((arg, i) => {
        if (arg === flag && i + 1 < args.length)
            value = args[i + 1];
        else if (arg.startsWith(`${flag}=`))
            value = arg.slice(flag.length + 1);
    });
    return value;
}
/** vLLM's `--max-model-len`: 4096, 4k (x1000), 4K (x1024); undefined for auto or junk. */
export function parseMaxModelLen(text) {
    const t = text?.trim();
    if (!t || t === 'auto' || t === '-1')
        return undefined;
    const scale = { k: 1e3, m: 1e6, g: 1e9, K: 1024, M: 1024 ** 2, G: 1024 ** 3 };
    const factor = scale[t.slice(-1)];
    const number = Number(factor ? t.slice(0, -1) : t);
    const value = Math.floor(number * (factor ?? 1));
    return Number.isFinite(value) && value > 0 ? value : undefined;
}
/** Checks the form and builds the load request (null while anything is wrong). */
export function validateLoadForm(v) {
    const errors = {};
    const modelPath = v.modelPath.trim();
    if (!modelPath)
        errors.modelPath = 'Required: a model directory or a Hugging Face id.';
    const tp = Number(v.tensorParallelSize);
    if (!Number.isInteger(tp) || tp < 1 || tp > 64)
        errors.tensorParallelSize = 'A whole number from 1 to 64.';
    else if (v.gpuIds.length > 0 && v.gpuIds.length !== tp)
        errors.gpuIds = `Tensor parallel size ${tp} needs exactly ${tp} GPU(s); ${v.gpuIds.length} chosen.`;
    let limit;
    if (v.gpuMemoryLimit.trim()) {
        limit = Number(v.gpuMemoryLimit);
        if (!Number.isFinite(limit) || limit <= 0 || limit > 4096)
            errors.gpuMemoryLimit = 'GB per GPU, above 0 and at most 4096.';
    }
    let extraArgs = [];
    try {
        extraArgs = splitArgs(v.extraArgs);
    }
    catch (e) {
        errors.extraArgs = e.message;
    }
    if (Object.keys(errors).length > 0)
        return { request: null, errors };
    const request = {
        modelPath,
        tensorParallelSize: tp,
        enableSleepMode: v.enableSleepMode,
        extraArgs,
    };
    if (v.engine !== 'default')
        request.engine = v.engine;
    if (v.servedModelName.trim())
        request.servedModelName = v.servedModelName.trim();
    if (v.displayName.trim())
        request.displayName = v.displayName.trim();
    if (v.gpuIds.length > 0)
        request.gpuIds = [...v.gpuIds].sort((a, b) => a - b);
    if (limit !== undefined)
        request.gpuMemoryLimit = limit;
    return { request, errors };
}
/** The fit question a load request asks (what the server itself asks before loading). */
export function fitRequestFor(req) {
    const fit = { modelPath: req.modelPath, tensorParallelSize: req.tensorParallelSize };
    const maxTokens = parseMaxModelLen(flagValue(req.extraArgs, '--max-model-len'));
    if (maxTokens !== undefined)
        fit.maxTokens = maxTokens;
    if (req.gpuIds)
        fit.gpuIds = req.gpuIds;
    if (req.gpuMemoryLimit !== undefined)
        fit.gpuMemoryLimit = req.gpuMemoryLimit;
    return fit;
}
/**
 * Warnings the dialog shows before Load: the seed's pre-Ampere rule (vLLM's
 * default attention kernels need compute capability 8.0; Sardeenz then adds
 * `--attention-backend TRITON_ATTN` unless the user chose a backend).
 */
export function preAmpereWarnings(gpuIds, gpus, extraArgs) {
    if (flagValue(extraArgs, '--attention-backend') !== undefined)
        return [];
    return gpus
        .filter((g) => gpuIds.includes(g.index) && g.computeCapability && g.computeCapability[0] < 8)
        .map((g) => {
        const [major, minor] = g.computeCapability ?? [0, 0];
        return (`GPU ${g.index} (${g.name}) has compute capability ${major}.${minor} < 8.0: ` +
            'FlashInfer/FlashAttention need Ampere; the load will use --attention-backend TRITON_ATTN.');
    });
}
