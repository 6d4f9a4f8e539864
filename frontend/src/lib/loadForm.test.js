import { describe, expect, it } from 'vitest';
import { EMPTY_LOAD_FORM, fitRequestFor, flagValue, parseMaxModelLen, preAmpereWarnings, splitArgs, validateLoadForm } from './loadForm';
describe('splitArgs', () => {
    it('splits on whitespace and honours quotes and escapes', () => {
        expect(splitArgs('  --max-model-len 8192   --dtype half ')).toEqual(['--max-model-len', '8192', '--dtype', 'half']);
        expect(splitArgs(`--chat-template "a b" 'c "d"' e\\ f ""`)).toEqual(['--chat-template', 'a b', 'c "d"', 'e f', '']);
    });
    it('keeps shell syntax literal', () => {
        expect(splitArgs('--x $(rm -rf /); echo|cat')).toEqual(['--x', '$(rm', '-rf', '/);', 'echo|cat']);
    });
    it('rejects an unterminated quote', () => {
        expect(() => splitArgs('--x "open')).toThrow(/unterminated/);
    });
});
describe('flags', () => {
    it('takes the last value, in either spelling', () => {
        expect(flagValue(['--max-model-len', '4096', '--max-model-len=8k'], '--max-model-len')).toBe('8k');
        expect(flagValue(['--max-model-len'], '--max-model-len')).toBeUndefined();
    });
    it.each([
        ['4096', 4096],
        ['4k', 4000],
        ['4K', 4096],
        ['1.5M', 1572864],
        ['auto', undefined],
        ['-1', undefined],
        ['lots', undefined],
    ])('--max-model-len %s -> %s', (text, value) => expect(parseMaxModelLen(text)).toBe(value));
});
describe('validateLoadForm', () => {
    it('requires a model path', () => {
        const { request, errors } = validateLoadForm(EMPTY_LOAD_FORM);
        expect(request).toBeNull();
        expect(errors.modelPath).toMatch(/Required/);
    });
    it('builds the minimal request, leaving defaults to the server', () => {
        const { request } = validateLoadForm({ ...EMPTY_LOAD_FORM, modelPath: ' /models/qwen ' });
        expect(request).toEqual({ modelPath: '/models/qwen', tensorParallelSize: 1, enableSleepMode: false, extraArgs: [] });
    });
    it('passes every field the user set', () => {
        const { request } = validateLoadForm({
            modelPath: 'm',
            servedModelName: 'qwen',
            displayName: 'Qwen',
            engine: 'sim',
            gpuIds: [1, 0],
            gpuMemoryLimit: '8.5',
            tensorParallelSize: '2',
            enableSleepMode: true,
            extraArgs: '--max-model-len 8192',
        });
        expect(request).toEqual({
            modelPath: 'm',
            servedModelName: 'qwen',
            displayName: 'Qwen',
            engine: 'sim',
            gpuIds: [0, 1],
            gpuMemoryLimit: 8.5,
            tensorParallelSize: 2,
            enableSleepMode: true,
            extraArgs: ['--max-model-len', '8192'],
        });
    });
    it('checks the GPU count against the tensor parallel size, and the limit', () => {
        const { errors } = validateLoadForm({ ...EMPTY_LOAD_FORM, modelPath: 'm', gpuIds: [0], tensorParallelSize: '2', gpuMemoryLimit: '0' });
        expect(errors.gpuIds).toMatch(/exactly 2/);
        expect(errors.gpuMemoryLimit).toBeDefined();
        expect(validateLoadForm({ ...EMPTY_LOAD_FORM, modelPath: 'm', tensorParallelSize: '0' }).errors.tensorParallelSize).toBeDefined();
    });
});
describe('fitRequestFor', () => {
    it('asks what the server asks before a load', () => {
        expect(fitRequestFor({ modelPath: 'm', tensorParallelSize: 2, gpuIds: [0, 1], gpuMemoryLimit: 10, enableSleepMode: false, extraArgs: ['--max-model-len=4k'] })).toEqual({ modelPath: 'm', tensorParallelSize: 2, gpuIds: [0, 1], gpuMemoryLimit: 10, maxTokens: 4000 });
    });
});
describe('preAmpereWarnings', () => {
    const gpu = (index, name, cc) => ({
        index,
        name,
        uuid: `u${index}`,
        totalBytes: 1,
        usedBytes: 0,
        freeBytes: 1,
        utilizationPercent: null,
        computeCapability: cc,
        processes: [],
        simulated: true,
    });
    const gpus = [gpu(0, 'NVIDIA L4', [8, 9]), gpu(1, 'Tesla T4', [7, 5]), gpu(2, 'Mystery', null)];
    it('warns for each chosen GPU below compute capability 8.0', () => {
        const [w, ...rest] = preAmpereWarnings([0, 1, 2], gpus, []);
        expect(rest).toHaveLength(0);
        expect(w).toMatch(/GPU 1 \(Tesla T4\) has compute capability 7\.5/);
        expect(w).toMatch(/TRITON_ATTN/);
    });
    it('says nothing when the user chose an attention backend', () => {
        expect(preAmpereWarnings([1], gpus, ['--attention-backend', 'FLASHINFER'])).toEqual([]);
        expect(preAmpereWarnings([0], gpus, [])).toEqual([]);
    });
});
