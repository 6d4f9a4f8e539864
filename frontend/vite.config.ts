/// <reference types="vitest/config" />
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

// `npm run dev` proxies the API to a running `sardeenz serve` (default port 3000).
const backend = process.env.SARDEENZ_URL ?? 'http://127.0.0.1:3000';

export default defineConfig({
  plugins: [react()],
  build: {
    outDir: '../src/sardeenz/web',
    emptyOutDir: true,
    chunkSizeWarningLimit: 800,
  },
  server: {
    proxy: Object.fromEntries(
      ['/api', '/v1', '/metrics', '/openapi.json', '/docs'].map((p) => [p, backend]),
    ),
  },
  test: {
    environment: 'node', // component tests opt in with a @vitest-environment happy-dom comment
    include: ['src/**/*.test.{ts,tsx}'],
  },
});
