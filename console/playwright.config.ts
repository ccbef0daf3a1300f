import { defineConfig } from '@playwright/test'

// Browser tests of the console against a real `floatplane server --dev` (e2e/global-setup.ts),
// in Debian's chromium: nothing downloads a browser (CON-21, CON-22).
export default defineConfig({
  testDir: 'e2e',
  globalSetup: './e2e/global-setup.ts',
  // Two cores: at most two browsers at once. Each test makes its own project, so tests share
  // only the server and its pools.
  workers: 2,
  fullyParallel: true,
  timeout: 60_000,
  expect: { timeout: 10_000 },
  reporter: [['list']],
  outputDir: 'test-results',
  use: {
    headless: true,
    viewport: { width: 1280, height: 800 },
    contextOptions: { reducedMotion: 'reduce' },
    // A trace (every action's DOM snapshot and screenshot) kept for a failed test, for a
    // developer to open with `npx playwright show-trace`. Recording it costs every test, failed
    // or not: scripts/test, whose run leaves only its log, turns it off
    // (FLOATPLANE_CONSOLE_TRACE=off: 47 s and 82 CPU-s with it, 37 s and 61 without,
    // 2026-12-06).
    trace: process.env.FLOATPLANE_CONSOLE_TRACE === 'off' ? 'off' : 'retain-on-failure',
    screenshot: 'only-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    },
  },
  projects: [{ name: 'chromium' }],
})
