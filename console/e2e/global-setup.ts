// Starts what the browser tests drive (CON-23): a real `floatplane server --dev` serving the
// built console (dist/), on a fresh data dir and a free port, with one switch agent and one
// sled agent in their own processes (a sled that takes 6 s to start an instance, so that a
// test can watch "starting" turn into "running"). Seeds the fleet's pools. The tests read
// where it runs from e2e/.server.json; teardown stops the processes.
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'

import { SERVER_FILE, apiAs } from './helpers'

const binary = resolve(process.env.FLOATPLANE_BIN ?? '../build/debug/floatplane')

function start(args: string[], log: string): Promise<{ child: ChildProcess; url: string }> {
  return new Promise((ok, fail) => {
    const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    const timer = setTimeout(() => fail(new Error(`${args[0]} did not start in 30 s: ${err}`)), 30_000)
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      const match = out.match(/^listening on (\S+)$/m)
      if (match) {
        clearTimeout(timer)
        ok({ child, url: match[1] })
      }
    })
    child.stderr!.on('data', (chunk: Buffer) => {
      err += chunk.toString()
      writeFileSync(log, err)
    })
    child.on('exit', (code) => {
      clearTimeout(timer)
      fail(new Error(`${args[0]} exited with ${code} before it listened: ${err}`))
    })
  })
}

export default async function globalSetup() {
  const dir = mkdtempSync(join(tmpdir(), 'floatplane-console-e2e-'))
  const secret = join(dir, 'agent-secret')
  writeFileSync(secret, randomBytes(24).toString('hex') + '\n', { mode: 0o600 })
  const common = ['--sim', '--listen', '127.0.0.1:0', '--secret-file', secret]
  const children: ChildProcess[] = []
  try {
    const sw = await start(['switch-agent', ...common], join(dir, 'switch.log'))
    children.push(sw.child)
    const sled = await start(['sled-agent', ...common, '--start-delay-ms', '6000', '--stop-delay-ms', '200'], join(dir, 'sled.log'))
    children.push(sled.child)
    const server = await start(
      [
        'server', '--dev', '--data-dir', join(dir, 'data'), '--listen', '127.0.0.1:0',
        '--console-dir', resolve('dist'), '--switch-agent', sw.url, '--sled-agent', sled.url,
        '--agent-secret-file', secret,
      ],
      join(dir, 'server.log'),
    )
    children.push(server.child)
    const token = readFileSync(join(dir, 'data', 'admin-token'), 'utf8').trim()
    writeFileSync(SERVER_FILE, JSON.stringify({ url: server.url, token, dir }))
    const api = apiAs(server.url, token)
    for (const [name, version, first, last] of [
      ['public-v4', 'v4', '10.0.0.0', '10.0.3.255'],
      ['public-v6', 'v6', 'fd00::1', 'fd00::ffff'],
    ]) {
      await api('POST', '/v1/system/ip-pools', { name, description: `the ${version} uplink`, ip_version: version })
      await api('POST', `/v1/system/ip-pools/${name}/ranges/add`, { first, last })
      await api('POST', `/v1/system/ip-pools/${name}/silos`, { silo: 'default', is_default: true })
    }
  } catch (e) {
    for (const child of children) child.kill('SIGKILL')
    throw e
  }
  return async () => {
    for (const child of children.reverse()) {
      child.kill('SIGTERM')
      await new Promise((done) => (child.exitCode !== null ? done(null) : child.once('exit', done)))
    }
    rmSync(dir, { recursive: true, force: true })
    rmSync(SERVER_FILE, { force: true })
  }
}
