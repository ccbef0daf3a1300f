// The instance networking tab's rules (CON-13, the Oxide console's): whether "Attach ephemeral
// IP" and "Attach floating IP" are possible, why not, and what the pickers offer.

import { ipVersionOf } from './ip'
import type { ExternalIp, FloatingIp, IpVersion, SiloIpPool } from './types'

/** Floating and ephemeral addresses an instance may hold (SNAT not counted). */
export const MAX_EXTERNAL_IPS = 32

export interface EphemeralSlot {
  /** Why no ephemeral IP can be attached, or undefined. */
  disabledReason?: string
  /** The pools the picker offers: unicast, of a version the instance has no ephemeral IP of. */
  pools: SiloIpPool[]
  /** The pool to preselect: the only default among `pools`, if exactly one. */
  preselected?: SiloIpPool
  /** Why some pools are not offered, or undefined. */
  note?: string
}

const countable = (ips: ExternalIp[]) => ips.filter((ip) => ip.kind !== 'snat').length

export function ephemeralSlot(ips: ExternalIp[], pools: SiloIpPool[]): EphemeralSlot {
  const unicast = pools.filter((p) => (p.pool_type ?? 'unicast') === 'unicast')
  const held = new Set<IpVersion>(
    ips.filter((ip) => ip.kind === 'ephemeral').map((ip) => ipVersionOf(ip.ip)),
  )
  if (countable(ips) >= MAX_EXTERNAL_IPS) {
    return { disabledReason: `IP address limit of ${MAX_EXTERNAL_IPS} reached for this instance`, pools: [] }
  }
  if (held.has('v4') && held.has('v6')) {
    return { disabledReason: 'Instance already has v4 and v6 ephemeral IPs', pools: [] }
  }
  const open = unicast.filter((p) => !held.has(p.ip_version))
  if (open.length === 0) {
    if (held.size > 0) {
      const other: IpVersion = held.has('v4') ? 'v6' : 'v4'
      const versions = new Set(unicast.map((p) => p.ip_version))
      return {
        disabledReason:
          versions.size > 1 || versions.has(other)
            ? `No ${other} pools available for ephemeral IPs`
            : 'Instance already has an ephemeral IP',
        pools: [],
      }
    }
    return { disabledReason: 'No pools available for ephemeral IPs', pools: [] }
  }
  const defaults = open.filter((p) => p.is_default)
  let note: string | undefined
  if (held.size === 1) {
    const have = [...held][0]
    const other = have === 'v4' ? 'v6' : 'v4'
    note = `Only ${other} pools are shown because this instance already has a ${have} ephemeral IP`
  }
  return { pools: open, preselected: defaults.length === 1 ? defaults[0] : undefined, note }
}

export interface FloatingSlot {
  disabledReason?: string
  /** Floating IPs of the project attached to nothing. */
  candidates: FloatingIp[]
}

export function floatingSlot(ips: ExternalIp[], projectIps: FloatingIp[]): FloatingSlot {
  if (countable(ips) >= MAX_EXTERNAL_IPS) {
    return {
      disabledReason: `Floating IP address limit of ${MAX_EXTERNAL_IPS} reached for this instance`,
      candidates: [],
    }
  }
  const candidates = projectIps.filter((ip) => ip.instance_id === null)
  if (candidates.length === 0) return { disabledReason: 'No available floating IPs', candidates }
  return { candidates }
}

/**
 * The `ip_version` to name when detaching the ephemeral IP `ip`: needed only when the instance
 * holds ephemeral IPs of both versions.
 */
export function ephemeralDetachVersion(ips: ExternalIp[], ip: string): IpVersion | undefined {
  const versions = new Set(ips.filter((x) => x.kind === 'ephemeral').map((x) => ipVersionOf(x.ip)))
  return versions.size > 1 ? ipVersionOf(ip) : undefined
}

/** The addresses an instance's header shows: at most two non-SNAT ones, and whether more. */
export function headerIps(ips: ExternalIp[]): { shown: string[]; more: boolean } {
  const reachable = ips.filter((ip) => ip.kind !== 'snat').map((ip) => ip.ip)
  return { shown: reachable.slice(0, 2), more: reachable.length > 2 }
}
