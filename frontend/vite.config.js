/// <reference types="vitest/config" />
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { brotliCompress, constants, gzip } from 'node:zlib';
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';
// `npm run dev` proxies the API to a running `sardeenz serve` (default port 3000).
const backend = process.env.SARDEENZ_URL ?? 'http://127.0.0.1:3000';
// Precompressed siblings (`x.js.gz`, `x.js.br`) of every compressible file of the build,
// written once here so the server never compresses per request (see docs/dashboard.md).
const COMPRESSIBLE = /\.(?:js|mjs|css|html|svg|json|map|txt)$/;
const MIN_BYTES = 1024; // below this, the headers outweigh the saving
const gzipAsync = promisify(gzip);
const brotliAsync = promisify(brotliCompress);
async function filesUnder(dir) {
    const entries = await readdir(dir, { withFileTypes: true, recursive: true });
    return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}
function precompress() {
    let outDir = '';
    return {
        name: 'sardeenz-precompress',
        apply: 'build',
        configResolved(config) {
            outDir = resolve(config.root, config.build.outDir);
        },
        // closeBundle, after everything (public/ included) is written; not writeBundle, whose
        // time Rolldown reports as a slow plugin (Brotli's best quality takes a few seconds).
        async closeBundle(error) {
            if (error)
                return;
            const files = (await filesUnder(outDir)).filter((f) => COMPRESSIBLE.test(f));
            await Promise.all(files.map(async (file) => {
                const plain = await readFile(file);
                if (plain.length < MIN_BYTES)
                    return;
                const [gz, br] = await Promise.all([
                    gzipAsync(plain, { level: 9 }),
                    brotliAsync(plain, {
                        params: {
                            [constants.BROTLI_PARAM_QUALITY]: constants.BROTLI_MAX_QUALITY,
                            [constants.BROTLI_PARAM_SIZE_HINT]: plain.length,
                        },
                    }),
                ]);
                // A sibling that saves nothing is not written; the server then sends the plain file.
                if (gz.length < plain.length)
                    await writeFile(`${file}.gz`, gz);
                if (br.length < plain.length)
                    await writeFile(`${file}.br`, br);
            }));
        },
    };
}
export default defineConfig({
    plugins: [react(), precompress()],
    build: {
        outDir: '../src/sardeenz/web',
        emptyOutDir: true,
        chunkSizeWarningLimit: 800,
    },
    server: {
        proxy: Object.fromEntries(['/api', '/v1', '/metrics', '/openapi.json', '/docs'].map((p) => [p, backend])),
    },
    test: {
        environment: 'node', // component tests opt in with a @vitest-environment happy-dom comment
        include: ['src/**/*.test.{ts,tsx}'],
    },
});
