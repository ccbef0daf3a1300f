// The API's shapes the console reads (../shared/api/nexus-external-ip-subset.json), as the
// server sends them.

export type IpVersion = 'v4' | 'v6'

export interface Page<T> {
  items: T[]
  next_page: string | null
}

export interface CurrentUser {
  id: string
  display_name: string
  silo_id: string
  silo_name: string
  fleet_viewer: boolean
  silo_admin: boolean
}

export interface Project {
  id: string
  name: string
  description: string
  time_created: string
}

export interface FloatingIp {
  id: string
  name: string
  description: string
  ip: string
  ip_pool_id: string
  instance_id: string | null
  project_id: string
  time_created: string
}

export type InstanceState =
  | 'creating'
  | 'starting'
  | 'running'
  | 'stopping'
  | 'stopped'
  | 'rebooting'
  | 'migrating'
  | 'repairing'
  | 'failed'
  | 'destroyed'

export interface Instance {
  id: string
  name: string
  description: string
  run_state: InstanceState
  ncpus: number
  memory: number
  hostname: string
  project_id: string
  time_run_state_updated: string
}

export type ExternalIp =
  | { kind: 'snat'; ip: string; ip_pool_id: string; first_port: number; last_port: number }
  | { kind: 'ephemeral'; ip: string; ip_pool_id: string }
  | ({ kind: 'floating' } & FloatingIp)

export interface IpPool {
  id: string
  name: string
  description: string
  ip_version: IpVersion
  pool_type?: 'unicast' | 'multicast'
  time_created: string
}

/** A pool as a silo's user sees it (`GET /v1/ip-pools`). */
export interface SiloIpPool extends IpPool {
  is_default: boolean
}

export interface IpRange {
  first: string
  last: string
}

export interface IpPoolRange {
  id: string
  ip_pool_id: string
  range: IpRange
  time_created: string
}

export interface IpPoolSiloLink {
  ip_pool_id: string
  silo_id: string
  is_default: boolean
}

export interface IpPoolUtilization {
  capacity: number
  remaining: number
}

/**
 * What a silo holds of a pool linked to it, by kind (floatplane's, in /v1/utilization), and the
 * pool's size; not what is left of it, which would tell what other silos hold.
 */
export interface SiloPoolUse {
  id: string
  name: string
  ip_version: 'v4' | 'v6'
  capacity: number
  floating: number
  ephemeral: number
  snat_blocks: number
}

/** Oxide's Utilization with floatplane's IP quota fields. */
export interface SiloUtilization {
  capacity: { cpus: number; memory: number; storage: number }
  provisioned: { cpus: number; memory: number; storage: number }
  ipv4_addresses: number | null
  ipv6_addresses: number | null
  ipv4_addresses_used: number
  ipv6_addresses_used: number
  ip_pools: SiloPoolUse[]
}

export interface Silo {
  id: string
  name: string
  description: string
  discoverable: boolean
  identity_mode: string
  time_created: string
}

export interface SiloIpPoolLink extends IpPool {
  is_default: boolean
}

export interface ErrorView {
  error_code: string
  http_status_code: number
  message: string
}

export interface SagaSummary {
  id: string
  name: string
  state: string
  time_created: string
  time_ended: string | null
  request_id: string | null
}

export interface SagaNode {
  index: number
  name: string
  action: string
  outcome: string
  time_started: string | null
  time_ended: string | null
  error: ErrorView | null
}

export interface SagaStory extends SagaSummary {
  origin: unknown
  targets: unknown
  params: unknown
  nodes: SagaNode[]
  error: ErrorView | null
  explanation: string
}

export interface AuditLogEntry {
  id: string
  time_started: string
  time_completed: string
  request_id: string
  request_uri: string
  operation_id: string
  source_ip: string
  user_agent?: string | null
  actor:
    | { kind: 'user_builtin'; user_builtin_id: string }
    | { kind: 'silo_user'; silo_id: string; silo_user_id: string }
    | { kind: 'scim'; silo_id: string }
    | { kind: 'unauthenticated' }
  auth_method?: string | null
  result:
    | { kind: 'success'; http_status_code: number }
    | { kind: 'error'; http_status_code: number; error_code: string | null; error_message: string }
    | { kind: 'unknown' }
}

/** floatplane's extension: an address allocated from a pool and who holds it. */
export interface PoolAddress {
  external_ip_id: string
  ip: string
  kind: 'snat' | 'ephemeral' | 'floating'
  first_port: number
  last_port: number
  range_id: string
  name: string | null
  instance_id: string | null
  instance_name: string | null
  project_id: string | null
  project_name: string | null
  silo_id: string | null
  silo_name: string | null
  time_created: string
}
