// The console in a real browser against a real server (issue 24, item 4; CON-25). Each test
// makes its own project; locators go by role and accessible name.
import { expect, test } from '@playwright/test'

import { admin, createInstance, freshProject, loginWithToken, row, server, waitForState } from './helpers'

const XSS = '<img src=x onerror="window.__xss=1">'

test('logs in with a password and with the token; logout ends the session on the server', async ({ page, context }) => {
  const user = `alice-${Date.now().toString(36)}`
  await admin()('POST', '/v1/system/identity-providers/local/users', {
    external_id: user,
    password: { mode: 'password', value: 'correct horse battery staple' },
    role: 'silo_collaborator',
  }, { silo: 'default' })

  await page.goto(`${server().url}/projects`)
  // No session: the console sends the browser to log in, and back afterwards.
  await expect(page).toHaveURL(/\/login\?next=%2Fprojects/)
  await page.getByRole('tab', { name: 'Username and password' }).click()
  await page.getByLabel('Username').fill(user)
  await page.getByLabel('Password').fill('wrong')
  await page.getByRole('button', { name: 'Log in' }).click()
  await expect(page.getByRole('alert')).toContainText('credentials invalid: wrong user name or password')
  await page.getByLabel('Password').fill('correct horse battery staple')
  await page.getByRole('button', { name: 'Log in' }).click()
  await expect(page.getByRole('heading', { name: 'Projects' })).toBeVisible()
  await expect(page.getByRole('banner')).toContainText(user)
  // A silo collaborator sees no system pages (CON-4).
  await expect(page.getByRole('link', { name: 'IP pools' })).toHaveCount(0)

  // The session cookie is HttpOnly and SameSite=Strict: no script can read it.
  const cookie = (await context.cookies()).find((c) => c.name === 'session')
  expect(cookie?.httpOnly).toBe(true)
  expect(cookie?.sameSite).toBe('Strict')
  expect(await page.evaluate(() => document.cookie)).not.toContain('session')

  await page.getByRole('button', { name: 'Log out' }).click()
  await expect(page.getByRole('button', { name: 'Log in' })).toBeVisible()
  // The old cookie is dead on the server, not only forgotten by the browser.
  const replay = await fetch(`${server().url}/v1/me`, { headers: { cookie: `session=${cookie!.value}` } })
  expect(replay.status).toBe(401)

  // The bootstrap token, traded for a session: a fleet admin, who sees the system pages.
  await loginWithToken(page)
  await expect(page.getByRole('banner')).toContainText('fleet admin')
  await expect(page.getByRole('link', { name: 'IP pools' })).toBeVisible()
})

test('creates a floating IP, attaches it to a running instance, detaches it and deletes it', async ({ page }) => {
  const project = await freshProject('floating ip lifecycle')
  const instance = await createInstance(project, 'web-1')
  await loginWithToken(page)
  await page.goto(`${server().url}/projects/${project}/floating-ips`)
  await expect(page.getByText('No floating IPs')).toBeVisible()

  await page.getByRole('button', { name: 'New floating IP' }).click()
  const create = page.getByRole('dialog', { name: 'Create floating IP' })
  await create.getByLabel('Name').fill('Shop')
  await expect(create.getByText('Can only contain lower-case letters, numbers, and dashes')).toBeVisible()
  await create.getByLabel('Name').fill('shop')
  await create.getByLabel('Description').fill('www.example.com')
  // Two default pools (v4 and v6): none is chosen for the user.
  await create.getByRole('button', { name: 'Create floating IP' }).click()
  await expect(create.getByText('Pool is required')).toBeVisible()
  await create.getByLabel('Pool').selectOption('public-v4')
  await create.getByRole('button', { name: 'Create floating IP' }).click()
  await expect(create).toBeHidden()
  await expect(page.getByRole('status')).toContainText('Floating IP shop created')
  const shop = row(page, 'Floating IPs', 'shop')
  await expect(shop).toContainText('public-v4')
  const ip = (await shop.getByRole('cell').nth(2).innerText()).trim()
  expect(ip).toMatch(/^10\.0\.\d+\.\d+$/)

  await waitForState(project, 'web-1', 'running')
  await page.reload()
  await page.getByRole('button', { name: 'Attach shop' }).click()
  const attach = page.getByRole('dialog', { name: 'Attach floating IP shop' })
  await expect(attach.getByRole('radio', { name: /web-1/ })).toBeChecked()
  await expect(attach).toContainText(`The selected instance will be reachable at ${ip}`)
  await attach.getByRole('button', { name: 'Attach' }).click()
  await expect(attach).toBeHidden()
  await expect(shop.getByRole('link', { name: 'web-1' })).toBeVisible()
  const attached = await admin()<{ instance_id: string }>('GET', '/v1/floating-ips/shop', undefined, { project })
  expect(attached.instance_id).toBe(instance.id)
  // Attached: it cannot be deleted, and says why.
  await expect(page.getByRole('button', { name: 'Delete shop' })).toBeDisabled()
  await expect(page.locator('[title="This floating IP must be detached from the instance before it can be deleted"]')).toHaveCount(1)

  await page.getByRole('button', { name: 'Detach shop' }).click()
  const detach = page.getByRole('dialog', { name: 'Detach floating IP' })
  await expect(detach).toContainText(
    `Are you sure you want to detach floating IP shop from instance web-1? The instance will no longer be reachable at ${ip}.`,
  )
  await detach.getByRole('button', { name: 'Detach' }).click()
  await expect(page.getByRole('status')).toContainText('Floating IP shop detached')
  await expect(shop.getByRole('link', { name: 'web-1' })).toHaveCount(0)

  await page.getByRole('button', { name: 'Delete shop' }).click()
  await page.getByRole('dialog', { name: 'Delete floating IP' }).getByRole('button', { name: 'Delete' }).click()
  await expect(page.getByText('No floating IPs')).toBeVisible()
  const left = await admin()<{ items: unknown[] }>('GET', '/v1/floating-ips', undefined, { project })
  expect(left.items).toHaveLength(0)
})

test('watches an instance go from starting to running, and the 503 of an attach while it starts', async ({ page }) => {
  const project = await freshProject('starting to running')
  await createInstance(project, 'vm', false)
  await admin()('POST', '/v1/floating-ips', {
    name: 'door', description: '', address_allocator: { type: 'auto', pool_selector: { type: 'explicit', pool: 'public-v4' } },
  }, { project })
  await loginWithToken(page)
  await page.goto(`${server().url}/projects/${project}/instances`)
  const vm = row(page, 'Instances', 'vm')
  await expect(vm).toContainText('stopped')
  await page.getByRole('button', { name: 'Start vm' }).click()
  await expect(vm).toContainText('starting')

  // While it starts (its sled takes 6 s, from the click to "running"), an attach is answered 503: the server's words,
  // verbatim, and the dialog stays open to try again.
  await vm.getByRole('link', { name: 'vm' }).click()
  await page.getByRole('button', { name: 'Attach floating IP' }).click()
  const attach = page.getByRole('dialog', { name: 'Attach floating IP' })
  await attach.getByRole('button', { name: 'Attach' }).click()
  await expect(attach.getByRole('alert')).toContainText('instance "vm" is starting; retry the attach of floating IP "door"')
  // The header turns to running without a reload; then the same button succeeds.
  await expect(page.getByRole('main').getByText('running', { exact: true })).toBeVisible({ timeout: 15_000 })
  await attach.getByRole('button', { name: 'Attach' }).click()
  await expect(attach).toBeHidden()
  await expect(row(page, 'External IPs', 'door')).toContainText('floating')
})

test('an attach refused because the IP is attached elsewhere names the holder; Reassign moves it in one step', async ({ page }) => {
  const project = await freshProject('holder named')
  await Promise.all([createInstance(project, 'a-1'), createInstance(project, 'b-1')])
  await admin()('POST', '/v1/floating-ips', {
    name: 'shared', description: '', address_allocator: { type: 'auto', pool_selector: { type: 'explicit', pool: 'public-v4' } },
  }, { project })
  await Promise.all([waitForState(project, 'a-1', 'running'), waitForState(project, 'b-1', 'running')])
  await loginWithToken(page)
  await page.goto(`${server().url}/projects/${project}/floating-ips`)
  await page.getByRole('button', { name: 'Attach shared' }).click()
  const attach = page.getByRole('dialog', { name: 'Attach floating IP shared' })
  // Someone else attaches it first.
  await admin()('POST', '/v1/floating-ips/shared/attach', { kind: 'instance', parent: 'a-1' }, { project })
  await attach.getByRole('radio', { name: /b-1/ }).check()
  await attach.getByRole('button', { name: 'Attach' }).click()
  await expect(attach.getByRole('alert')).toContainText('is attached to instance "a-1"; detach it first')
  await expect(attach.getByRole('alert')).toContainText('request id')
  await attach.getByRole('button', { name: 'Cancel' }).click()

  // The move the error suggests, from the list: the holder is not offered, the other instance is.
  await page.reload()
  await page.getByRole('button', { name: 'Reassign shared' }).click()
  const reassign = page.getByRole('dialog', { name: 'Reassign floating IP shared' })
  await expect(reassign).toContainText('moves from instance a-1')
  await expect(reassign.getByRole('radio', { name: /a-1/ })).toHaveCount(0)
  await expect(reassign.getByRole('radio', { name: /b-1/ })).toBeChecked()
  await reassign.getByRole('button', { name: 'Reassign' }).click()
  await expect(reassign).toBeHidden()
  const b = await admin()<{ id: string }>('GET', '/v1/instances/b-1', undefined, { project })
  const moved = await admin()<{ instance_id: string }>('GET', '/v1/floating-ips/shared', undefined, { project })
  expect(moved.instance_id).toBe(b.id)
  await expect(row(page, 'Floating IPs', 'shared')).toContainText('b-1')
})

test('an operator adds a range, checked before it is sent, and links a pool as a silo’s new default', async ({ page }) => {
  const suffix = Date.now().toString(36)
  const silo = `tenant-${suffix}`
  await admin()('POST', '/v1/system/silos', {
    name: silo, description: '', discoverable: true, identity_mode: 'local_only',
    quotas: { cpus: 16, memory: 64 * 1024 ** 3, storage: 1024 ** 4 }, tls_certificates: [],
  })
  await admin()('POST', '/v1/system/ip-pools/public-v4/silos', { silo, is_default: true })
  await loginWithToken(page)
  await page.getByRole('link', { name: 'IP pools' }).click()
  await page.getByRole('button', { name: 'New IP pool' }).click()
  const create = page.getByRole('dialog', { name: 'Create IP pool' })
  const pool = `ops-${suffix}`
  await create.getByLabel('Name').fill(pool)
  await create.getByRole('button', { name: 'Create IP pool' }).click()
  await expect(create).toBeHidden()
  await page.getByRole('link', { name: pool }).click()

  await page.getByRole('button', { name: 'Add range' }).click()
  const add = page.getByRole('dialog', { name: 'Add IP range' })
  await add.getByLabel('First').fill('fd00::1')
  await add.getByLabel('Last').fill('10.1.0.300')
  await add.getByRole('button', { name: 'Add range' }).click()
  await expect(add.getByText('IPv6 address not allowed in IPv4 pool')).toBeVisible()
  await expect(add.getByText('Not a valid IP address')).toBeVisible()
  // A range of this test's own: a retry (same server) must not meet the last try's.
  const block = `10.${1 + (Date.now() % 200)}.${Math.floor(Math.random() * 250)}`
  await add.getByLabel('First').fill(`${block}.1`)
  await add.getByLabel('Last').fill(`${block}.9`)
  await add.getByRole('button', { name: 'Add range' }).click()
  await expect(add).toBeHidden()
  await expect(row(page, 'IP ranges', `${block}.1`)).toContainText(`${block}.9`)
  await expect(page.getByText('9 / 9')).toBeVisible()
  // A pool with a range cannot be deleted, and says why.
  await expect(page.getByRole('button', { name: 'Delete pool' })).toBeDisabled()

  await page.getByRole('tab', { name: 'Linked silos' }).click()
  await page.getByRole('button', { name: 'Link silo' }).click()
  const link = page.getByRole('dialog', { name: `Link pool ${pool} to a silo` })
  await link.getByLabel('Silo', { exact: true }).selectOption(silo)
  await link.getByRole('checkbox').check()
  await expect(link).toContainText('Replaces public-v4, which stays linked.')
  await link.getByRole('button', { name: 'Link' }).click()
  await expect(link).toBeHidden()
  await expect(row(page, 'Linked silos', silo)).toContainText('default')
  const pools = await admin()<{ items: { name: string; is_default: boolean }[] }>('GET', `/v1/system/silos/${silo}/ip-pools`)
  expect(pools.items.find((p) => p.name === pool)?.is_default).toBe(true)
  expect(pools.items.find((p) => p.name === 'public-v4')?.is_default).toBe(false)
})

test('names and descriptions are shown as text, never run; every answer forbids framing and inline script', async ({ page, request }) => {
  const project = await freshProject('markup is text')
  await admin()('PUT', `/v1/projects/${project}`, { description: XSS })
  await admin()('POST', '/v1/floating-ips', {
    name: 'tricky', description: XSS, address_allocator: { type: 'auto', pool_selector: { type: 'explicit', pool: 'public-v4' } },
  }, { project })
  await loginWithToken(page)
  const answer = await page.goto(`${server().url}/projects/${project}/floating-ips`)
  await expect(row(page, 'Floating IPs', 'tricky').getByRole('cell', { name: XSS })).toBeVisible()
  await page.goto(`${server().url}/projects`)
  await expect(row(page, 'Projects', project).getByRole('cell', { name: XSS })).toBeVisible()
  expect(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss)).toBeUndefined()
  await expect(page.locator('img[src="x"]')).toHaveCount(0)

  const policy = answer!.headers()['content-security-policy']
  expect(policy).toContain("script-src 'self'")
  expect(policy).toContain("frame-ancestors 'none'")
  expect(policy).not.toContain('unsafe-inline')
  expect(answer!.headers()['x-content-type-options']).toBe('nosniff')

  // The console's script: its type, and cached for good (its name changes with its content).
  const script = await page.locator('script[type="module"]').getAttribute('src')
  const asset = await request.get(`${server().url}${script}`)
  expect(asset.headers()['content-type']).toBe('text/javascript; charset=utf-8')
  expect(asset.headers()['cache-control']).toContain('immutable')
  // No path leaves the console's directory.
  for (const path of ['/assets/%2e%2e/%2e%2e/%2e%2e/etc/passwd', '/assets/..%2f..%2fpackage.json', '/%2e%2e/package.json']) {
    const escape = await request.get(`${server().url}${path}`)
    expect(escape.status(), path).toBe(404)
    expect(await escape.text(), path).not.toContain('root:')
  }
})

test('moves a detached floating IP to another project, keeping its address', async ({ page }) => {
  const from = await freshProject('move from')
  const to = await freshProject('move to')
  const created = await admin()<{ id: string; ip: string }>('POST', '/v1/floating-ips', {
    name: 'mover', description: '', address_allocator: { type: 'auto', pool_selector: { type: 'explicit', pool: 'public-v4' } },
  }, { project: from })
  await loginWithToken(page)
  await page.goto(`${server().url}/projects/${from}/floating-ips`)
  await page.getByRole('button', { name: 'Move mover' }).click()
  const move = page.getByRole('dialog', { name: 'Move floating IP mover' })
  await move.getByLabel('To project').selectOption(to)
  await expect(move).toContainText(`It keeps its address ${created.ip}`)
  await move.getByRole('button', { name: 'Move' }).click()
  await expect(page.getByRole('status')).toContainText(`Floating IP mover moved to project ${to}`)
  await expect(page.getByText('No floating IPs')).toBeVisible()
  const moved = await admin()<{ id: string; ip: string }>('GET', '/v1/floating-ips/mover', undefined, { project: to })
  expect([moved.id, moved.ip]).toEqual([created.id, created.ip])
})

test('creates an instance without outbound SNAT: it holds no address', async ({ page }) => {
  const project = await freshProject('without snat')
  await loginWithToken(page)
  await page.goto(`${server().url}/projects/${project}/instances`)
  await page.getByRole('button', { name: 'New instance' }).click()
  const create = page.getByRole('dialog', { name: 'Create instance' })
  await create.getByLabel('Name').fill('dark')
  await create.getByLabel('Start it once created').uncheck()
  await create.getByLabel('Outbound SNAT').uncheck()
  await expect(create).toContainText('No way out until an ephemeral or floating IP is attached')
  await create.getByRole('button', { name: 'Create instance' }).click()
  await expect(create).toBeHidden()
  await expect(row(page, 'Instances', 'dark')).toContainText('stopped')
  const ips = await admin()<{ items: unknown[] }>('GET', '/v1/instances/dark/external-ips', undefined, { project })
  expect(ips.items).toHaveLength(0)
})
