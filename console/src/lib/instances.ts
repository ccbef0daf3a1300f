// What can be done to an instance in each run state: the server's rules (omicron's, mirrored
// by the Oxide console), so that a button is disabled with a reason rather than refused.

import type { InstanceState } from './types'

export const TRANSITIONAL_STATES: ReadonlySet<InstanceState> = new Set<InstanceState>([
  'creating',
  'starting',
  'stopping',
  'rebooting',
  'migrating',
])

export const canStart = (s: InstanceState) => s === 'stopped' || s === 'failed'
export const canStop = (s: InstanceState) =>
  s === 'running' || s === 'starting' || s === 'rebooting' || s === 'failed'
export const canDelete = (s: InstanceState) => s === 'stopped' || s === 'failed'

/**
 * Why an IP cannot be attached to or detached from an instance in state `s` now (the server
 * answers 503 in these states and asks to try again), or undefined.
 */
export function addressChangeBlocked(s: InstanceState): string | undefined {
  switch (s) {
    case 'starting':
    case 'stopping':
    case 'migrating':
    case 'rebooting':
      return `The instance is ${s}: try again once it is ${s === 'stopping' ? 'stopped' : 'running'}`
    case 'creating':
      return 'The instance is being created'
    case 'destroyed':
      return 'The instance is deleted'
    default:
      return undefined
  }
}
