import { describe, expect, it } from 'vitest'

import { displayBigNum } from './bignum'
import { canDelete, canStart, canStop, addressChangeBlocked } from './instances'
import { parseIp, rangeErrors } from './ip'
import {
  MAX_EXTERNAL_IPS,
  ephemeralDetachVersion,
  ephemeralSlot,
  floatingSlot,
  headerIps,
} from './ipSlots'
import { nameError } from './names'
import { safeNext } from './next'
import { FAST_POLL_MS, SLOW_POLL_MS, newPollMemory, nextPollInterval } from './poll'
import type { ExternalIp, FloatingIp, SiloIpPool } from './types'

const pool = (name: string, ip_version: 'v4' | 'v6', is_default = false): SiloIpPool => ({
  id: `${name}-id`,
  name,
  description: '',
  ip_version,
  pool_type: 'unicast',
  is_default,
  time_created: '',
})
const snat: ExternalIp = { kind: 'snat', ip: '10.0.0.1', ip_pool_id: 'p', first_port: 0, last_port: 16383 }
const eph = (ip: string): ExternalIp => ({ kind: 'ephemeral', ip, ip_pool_id: 'p' })
const fip = (name: string, instance_id: string | null = null): FloatingIp => ({
  id: `${name}-id`,
  name,
  description: '',
  ip: '10.0.0.9',
  ip_pool_id: 'p',
  instance_id,
  project_id: 'pr',
  time_created: '',
})

describe('names', () => {
  it('says what is wrong in the console’s words', () => {
    expect(nameError('web-1')).toBeUndefined()
    expect(nameError('')).toBe('Name is required')
    expect(nameError('a'.repeat(64))).toBe('Must be 63 characters or fewer')
    expect(nameError('a'.repeat(63))).toBeUndefined()
    expect(nameError('Web')).toBe('Can only contain lower-case letters, numbers, and dashes')
    expect(nameError('web_1')).toBe('Can only contain lower-case letters, numbers, and dashes')
    expect(nameError('1web')).toBe('Must start with a lower-case letter')
    expect(nameError('web-')).toBe('Must end with a letter or number')
  })
})

describe('big numbers', () => {
  it('are exact when small, abbreviated when large, with the exact value kept', () => {
    expect(displayBigNum(254)).toEqual({ short: '254', exact: '254', abbreviated: false })
    expect(displayBigNum(65_536)).toEqual({ short: '65.5K', exact: '65,536', abbreviated: true })
    expect(displayBigNum(18_446_744_073_709_551_616).short).toBe('18.4e18')
    expect(displayBigNum(2 ** 128).short).toBe('340.3e36')
  })
})

describe('IP addresses and ranges', () => {
  it('parses both versions and refuses what the server would', () => {
    expect(parseIp('10.0.0.1')).toEqual({ version: 'v4', value: 0x0a000001n })
    expect(parseIp('fd00::1')?.value).toBe((0xfd00n << 112n) + 1n)
    expect(parseIp('::ffff:1.2.3.4')?.value).toBe((0xffffn << 32n) + 0x01020304n)
    expect(parseIp('::')?.value).toBe(0n)
    for (const bad of ['10.0.0', '10.0.0.256', '010.0.0.1', '1::2::3', 'fd00:::1', 'x', '', '1:2:3:4:5:6:7:8:9']) {
      expect(parseIp(bad), bad).toBeUndefined()
    }
  })
  it('validates a range in Oxide’s words', () => {
    expect(rangeErrors('10.0.0.1', '10.0.0.9', 'v4')).toEqual({ first: undefined, last: undefined })
    expect(rangeErrors('10.0.0', '10.0.0.9', 'v4').first).toBe('Not a valid IP address')
    expect(rangeErrors('fd00::1', '10.0.0.9', 'v4').first).toBe('IPv6 address not allowed in IPv4 pool')
    expect(rangeErrors('fd00::1', '10.0.0.9', 'v6').last).toBe('IPv4 address not allowed in IPv6 pool')
    expect(rangeErrors('10.0.0.9', '10.0.0.1', 'v4').last).toBe(
      'Must be greater than or equal to the first address',
    )
  })
})

describe('instance states', () => {
  it('mirror the server’s rules', () => {
    expect(canStart('stopped') && canStart('failed') && !canStart('running')).toBe(true)
    expect(canStop('starting') && canStop('failed') && !canStop('stopped')).toBe(true)
    expect(canDelete('failed') && !canDelete('running')).toBe(true)
    expect(addressChangeBlocked('starting')).toMatch(/starting/)
    expect(addressChangeBlocked('running')).toBeUndefined()
    expect(addressChangeBlocked('stopped')).toBeUndefined()
  })
})

describe('the instance networking tab', () => {
  const pools = [pool('v4-default', 'v4', true), pool('v4-other', 'v4'), pool('v6-default', 'v6', true)]
  it('offers ephemeral pools of the versions still open and says why the others are not', () => {
    const none = ephemeralSlot([snat], pools)
    expect(none.disabledReason).toBeUndefined()
    expect(none.pools.map((p) => p.name)).toEqual(['v4-default', 'v4-other', 'v6-default'])
    expect(none.preselected).toBeUndefined() // two defaults: the user chooses
    const withV4 = ephemeralSlot([snat, eph('10.0.0.5')], pools)
    expect(withV4.pools.map((p) => p.name)).toEqual(['v6-default'])
    expect(withV4.preselected?.name).toBe('v6-default')
    expect(withV4.note).toBe('Only v6 pools are shown because this instance already has a v4 ephemeral IP')
    expect(ephemeralSlot([eph('10.0.0.5'), eph('fd00::5')], pools).disabledReason).toBe(
      'Instance already has v4 and v6 ephemeral IPs',
    )
    expect(ephemeralSlot([eph('10.0.0.5')], [pool('only', 'v4', true)]).disabledReason).toBe(
      'Instance already has an ephemeral IP',
    )
    expect(ephemeralSlot([eph('10.0.0.5')], [pool('a', 'v4'), pool('b', 'v4')]).disabledReason).toBe(
      'Instance already has an ephemeral IP',
    )
    expect(ephemeralSlot([], []).disabledReason).toBe('No pools available for ephemeral IPs')
  })
  it('stops at the limit of addresses, SNAT not counted', () => {
    const full: ExternalIp[] = [snat, ...Array.from({ length: MAX_EXTERNAL_IPS }, () => fip('x', 'i')).map((f) => ({ kind: 'floating' as const, ...f }))]
    expect(floatingSlot(full, [fip('free')]).disabledReason).toBe(
      'Floating IP address limit of 32 reached for this instance',
    )
    expect(floatingSlot(full.slice(0, MAX_EXTERNAL_IPS), [fip('free')]).disabledReason).toBeUndefined()
    expect(ephemeralSlot(full, pools).disabledReason).toMatch(/limit of 32/)
  })
  it('offers only floating IPs attached to nothing', () => {
    const slot = floatingSlot([snat], [fip('busy', 'other-instance'), fip('free')])
    expect(slot.candidates.map((f) => f.name)).toEqual(['free'])
    expect(floatingSlot([snat], [fip('busy', 'i')]).disabledReason).toBe('No available floating IPs')
  })
  it('names the version to detach only when the instance holds both', () => {
    expect(ephemeralDetachVersion([eph('10.0.0.5')], '10.0.0.5')).toBeUndefined()
    expect(ephemeralDetachVersion([eph('10.0.0.5'), eph('fd00::5')], 'fd00::5')).toBe('v6')
  })
  it('shows at most two addresses in the header', () => {
    expect(headerIps([snat, eph('10.0.0.5')])).toEqual({ shown: ['10.0.0.5'], more: false })
    expect(headerIps([eph('1.1.1.1'), eph('fd00::1'), { kind: 'floating', ...fip('f') }])).toEqual({
      shown: ['1.1.1.1', 'fd00::1'],
      more: true,
    })
  })
})

describe('polling', () => {
  it('is fast for 30 s after a new transitional state, then slow', () => {
    const memory = newPollMemory()
    expect(nextPollInterval(memory, [], 0)).toBe(SLOW_POLL_MS)
    expect(nextPollInterval(memory, ['i1:starting'], 1_000)).toBe(FAST_POLL_MS)
    expect(nextPollInterval(memory, ['i1:starting'], 30_999)).toBe(FAST_POLL_MS)
    // Still starting, but not new: slow again after the window.
    expect(nextPollInterval(memory, ['i1:starting'], 31_000)).toBe(SLOW_POLL_MS)
    // The same instance in another transitional state is new.
    expect(nextPollInterval(memory, ['i1:stopping'], 40_000)).toBe(FAST_POLL_MS)
  })
})

describe('the page after logging in', () => {
  const origin = 'http://127.0.0.1:12220'
  it('is a path of the console, never another site', () => {
    expect(safeNext('/projects/web/floating-ips?x=1', origin)).toBe('/projects/web/floating-ips?x=1')
    for (const bad of [null, '', 'https://evil.example/', '//evil.example/x', '/\\evil.example', '/\t/evil', 'projects']) {
      expect(safeNext(bad, origin), String(bad)).toBe('/projects')
    }
  })
})
