import react from '@vitejs/plugin-react'
import { defineConfig } from 'vitest/config'

// `npm run build` writes dist/, which `floatplane server --console-dir dist` serves.
// `npx vite` serves the console with hot reload and sends the API's paths to a dev server on
// its default address (scripts/dev).
export default defineConfig({
  plugins: [react()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // The CSP allows no inline script: every module is a file under /assets/.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
  server: {
    proxy: { '/v1': 'http://127.0.0.1:12220' },
  },
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
  },
})
