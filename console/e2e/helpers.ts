import { expect, type Page } from '@playwright/test'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

export const SERVER_FILE = join(import.meta.dirname, '.server.json')

export interface Server {
  url: string
  token: string
  dir: string
}

export function server(): Server {
  return JSON.parse(readFileSync(SERVER_FILE, 'utf8'))
}

/** The API as a bearer token's holder (for setting up what a test needs, not for checks). */
export function apiAs(url: string, token: string) {
  return async <T = unknown>(method: string, path: string, body?: unknown, query?: Record<string, string>) => {
    const q = query ? `?${new URLSearchParams(query)}` : ''
    const response = await fetch(`${url}${path}${q}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    const text = await response.text()
    if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`)
    return (text ? JSON.parse(text) : undefined) as T
  }
}

export const admin = () => {
  const s = server()
  return apiAs(s.url, s.token)
}

/** A project of the test's own, named after it (CON-24: tests share no resources). */
export async function freshProject(title: string): Promise<string> {
  const name = `p-${title.toLowerCase().replace(/[^a-z0-9]+/g, '-').slice(0, 40)}-${Date.now().toString(36)}`.replace(/-+$/, '')
  await admin()('POST', '/v1/projects', { name, description: title })
  return name
}

export async function createInstance(project: string, name: string, start = true) {
  return admin()<{ id: string }>(
    'POST',
    '/v1/instances',
    { name, description: '', hostname: name, ncpus: 1, memory: 1024 ** 3, start },
    { project },
  )
}

export async function waitForState(project: string, instance: string, state: string) {
  await expect
    .poll(async () => (await admin()<{ run_state: string }>('GET', `/v1/instances/${instance}`, undefined, { project })).run_state, {
      timeout: 20_000,
    })
    .toBe(state)
}

export async function loginWithToken(page: Page) {
  await page.goto(`${server().url}/login`)
  await page.getByLabel('Token').fill(server().token)
  await page.getByRole('button', { name: 'Log in' }).click()
  await expect(page.getByRole('heading', { name: 'Projects' })).toBeVisible()
}

/** The row of `table` that holds `text`. */
export function row(page: Page, table: string, text: string) {
  return page.getByRole('table', { name: table }).getByRole('row').filter({ hasText: text })
}
