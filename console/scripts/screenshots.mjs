// Screenshots of every page of the console at 1280 px wide, for a person to look at:
//   node scripts/screenshots.mjs URL TOKEN_FILE OUT_DIR [PROJECT [INSTANCE]]
// Logs in with the token (traded for a session), then visits each page. Uses Debian's chromium.
import { chromium } from '@playwright/test'
import { readFileSync, mkdirSync } from 'node:fs'

const [url, tokenFile, out, project = 'web', instance = 'web-1'] = process.argv.slice(2)
if (!url || !tokenFile || !out) {
  console.error('usage: node scripts/screenshots.mjs URL TOKEN_FILE OUT_DIR [PROJECT [INSTANCE]]')
  process.exit(2)
}
mkdirSync(out, { recursive: true })
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
})
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } })
page.on('console', (m) => m.type() === 'error' && console.error(`console error: ${m.text()}`))
await page.goto(`${url}/login`)
await page.screenshot({ path: `${out}/login.png` })
await page.getByLabel('Token').fill(readFileSync(tokenFile, 'utf8').trim())
await page.getByRole('button', { name: 'Log in' }).click()
await page.waitForURL(/\/projects/)
const pages = [
  ['projects', '/projects'],
  ['instances', `/projects/${project}/instances`],
  ['floating-ips', `/projects/${project}/floating-ips`],
  ['networking', `/projects/${project}/instances/${instance}/networking`],
  ['utilization', '/utilization'],
  ['ip-pools', '/system/ip-pools'],
  ['ip-pool', '/system/ip-pools/public-v4'],
  ['ip-pool-silos', '/system/ip-pools/public-v4?tab=silos'],
  ['silos', '/system/silos'],
  ['sagas', '/system/sagas'],
  ['audit-log', '/system/audit-log'],
]
for (const [name, path] of pages) {
  await page.goto(`${url}${path}`)
  await page.waitForLoadState('networkidle')
  await page.screenshot({ path: `${out}/${name}.png`, fullPage: true })
  console.log(`${out}/${name}.png`)
}
// A saga's story, and the dialogs of the floating IPs page.
await page.goto(`${url}/system/sagas`)
await page.getByRole('table', { name: 'Sagas' }).getByRole('link').first().click()
await page.getByRole('table', { name: 'Nodes' }).waitFor()
await page.screenshot({ path: `${out}/saga.png`, fullPage: true })
await page.goto(`${url}/projects/${project}/floating-ips`)
await page.getByRole('button', { name: 'New floating IP' }).click()
await page.getByRole('dialog').getByRole('button', { name: 'Create floating IP' }).click()
await page.screenshot({ path: `${out}/floating-ip-create.png` })
await page.keyboard.press('Escape')
const detach = page.getByRole('button', { name: /^Detach / }).first()
if (await detach.count()) {
  await detach.click()
  await page.screenshot({ path: `${out}/floating-ip-detach.png` })
  await page.keyboard.press('Escape')
}
const attach = page.getByRole('button', { name: /^Attach / }).first()
if (await attach.count()) {
  await attach.click()
  await page.screenshot({ path: `${out}/floating-ip-attach.png` })
}
console.log(`${out}/saga.png and the dialogs`)
await browser.close()
