// IP addresses as the console checks them before a request (the server checks them again).

import type { IpVersion } from './types'

/** The address as a number (for comparing), with its version; undefined if not an address. */
export function parseIp(text: string): { version: IpVersion; value: bigint } | undefined {
  const v4 = parseIpv4(text)
  if (v4 !== undefined) return { version: 'v4', value: v4 }
  const v6 = parseIpv6(text)
  if (v6 !== undefined) return { version: 'v6', value: v6 }
  return undefined
}

function parseIpv4(text: string): bigint | undefined {
  const parts = text.split('.')
  if (parts.length !== 4) return undefined
  let value = 0n
  for (const part of parts) {
    // Decimal only, no leading zeros (as the server reads them).
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part)) return undefined
    const octet = Number(part)
    if (octet > 255) return undefined
    value = value * 256n + BigInt(octet)
  }
  return value
}

function parseIpv6(text: string): bigint | undefined {
  if (!/^[0-9a-fA-F:.]+$/.test(text)) return undefined
  const halves = text.split('::')
  if (halves.length > 2) return undefined
  const groups = (s: string): string[] | undefined => (s === '' ? [] : s.split(':'))
  const head = groups(halves[0])
  const tail = halves.length === 2 ? groups(halves[1]) : []
  if (!head || !tail) return undefined
  const words: number[] = []
  const push = (list: string[], last: boolean): boolean => {
    for (let i = 0; i < list.length; i++) {
      const g = list[i]
      if (last && i === list.length - 1 && g.includes('.')) {
        const v4 = parseIpv4(g)
        if (v4 === undefined) return false
        words.push(Number(v4 >> 16n), Number(v4 & 0xffffn))
        continue
      }
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return false
      words.push(parseInt(g, 16))
    }
    return true
  }
  const tailWords: number[] = []
  if (!push(head, halves.length === 1)) return undefined
  const headCount = words.length
  if (halves.length === 2) {
    if (!push(tail, true)) return undefined
    tailWords.push(...words.splice(headCount))
    const missing = 8 - headCount - tailWords.length
    if (missing < 1) return undefined
    words.push(...new Array<number>(missing).fill(0), ...tailWords)
  }
  if (words.length !== 8) return undefined
  return words.reduce((acc, w) => (acc << 16n) + BigInt(w), 0n)
}

/** Why `first`–`last` cannot be a range of a pool of `version`, in the Oxide console's words. */
export function rangeErrors(
  first: string,
  last: string,
  version: IpVersion,
): { first?: string; last?: string } {
  const errors: { first?: string; last?: string } = {}
  const check = (text: string): string | undefined => {
    const ip = parseIp(text.trim())
    if (!ip) return 'Not a valid IP address'
    if (ip.version !== version) {
      return version === 'v4' ? 'IPv6 address not allowed in IPv4 pool' : 'IPv4 address not allowed in IPv6 pool'
    }
    return undefined
  }
  errors.first = check(first)
  errors.last = check(last)
  if (!errors.first && !errors.last) {
    const a = parseIp(first.trim())!
    const b = parseIp(last.trim())!
    if (a.value > b.value) errors.last = 'Must be greater than or equal to the first address'
  }
  return errors
}

/** The version of a literal address (v4 unless it holds a colon). */
export function ipVersionOf(ip: string): IpVersion {
  return ip.includes(':') ? 'v6' : 'v4'
}
