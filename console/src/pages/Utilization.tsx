import { useQuery } from '@tanstack/react-query'

import { BigNum, EmptyState, ErrorText, PageHeader } from '../components/ui'
import { get, seg } from '../lib/api'
import { useMe, useSystemPools } from '../lib/queries'
import type { IpPool, IpPoolUtilization, SiloPoolUse, SiloUtilization } from '../lib/types'

/**
 * What the signed-in user's silo holds of each pool linked to it, by kind, against its IP
 * quotas (every role: /v1/utilization shows no other silo's holdings); for a fleet admin also
 * the addresses left in every pool of the fleet.
 */
export function UtilizationPage() {
  const me = useMe()
  const fleet = me.data?.fleet_viewer ?? false
  const mine = useQuery({ queryKey: ['utilization', 'silo'], queryFn: () => get<SiloUtilization>('/v1/utilization') })
  const system = useSystemPools(fleet)
  const u = mine.data
  return (
    <>
      <PageHeader title="Utilization" subtitle={`What your silo ${me.data?.silo_name ?? ''} holds of its IP pools, and its IP quotas.`} />
      <ErrorText error={mine.error} />
      {u && (
        <>
          <h2>IP quotas</h2>
          <div className="cards">
            <QuotaCard version="IPv4" used={u.ipv4_addresses_used} limit={u.ipv4_addresses} />
            <QuotaCard version="IPv6" used={u.ipv6_addresses_used} limit={u.ipv6_addresses} />
          </div>
          <h2>IP pools linked to your silo</h2>
          {u.ip_pools.length === 0 ? (
            <EmptyState title="No IP pools">An operator creates pools and links them to silos.</EmptyState>
          ) : (
            <div className="cards">
              {u.ip_pools.map((p) => (
                <SiloPoolCard key={p.id} pool={p} />
              ))}
            </div>
          )}
        </>
      )}
      {fleet && (
        <>
          <h2>Every pool of the fleet</h2>
          <ErrorText error={system.error} />
          <div className="cards">
            {(system.data ?? []).map((p) => (
              <FleetPoolCard key={p.id} pool={p} />
            ))}
          </div>
        </>
      )}
    </>
  )
}

function QuotaCard({ version, used, limit }: { version: string; used: number; limit: number | null }) {
  return (
    <section className="card" aria-label={`${version} quota`}>
      <div className="card-title">{version} addresses</div>
      <div className="card-number">
        {used}
        {limit === null ? <span className="muted">, no limit</span> : <><span className="muted"> of</span> {limit}</>}
      </div>
      <div className="muted">held by the silo (an SNAT block counts a quarter)</div>
      {limit !== null && <Meter label={`${version} quota in use`} share={limit > 0 ? used / limit : 1} />}
    </section>
  )
}

function SiloPoolCard({ pool }: { pool: SiloPoolUse }) {
  return (
    <section className="card" aria-label={`Pool ${pool.name}`}>
      <div className="card-title">
        {pool.name} <span className="muted">{pool.ip_version}</span>
      </div>
      <div className="card-number">
        {pool.floating} <span className="muted">floating,</span> {pool.ephemeral} <span className="muted">ephemeral,</span> {pool.snat_blocks}{' '}
        <span className="muted">SNAT block{pool.snat_blocks === 1 ? '' : 's'}</span>
      </div>
      <div className="muted">
        held by your silo, of <BigNum n={pool.capacity} /> addresses in the pool
      </div>
    </section>
  )
}

function FleetPoolCard({ pool }: { pool: IpPool }) {
  const utilization = useQuery({
    queryKey: ['utilization', pool.id],
    queryFn: () => get<IpPoolUtilization>(`/v1/system/ip-pools/${seg(pool.id)}/utilization`),
  })
  const u = utilization.data
  return (
    <section className="card" aria-label={`Fleet pool ${pool.name}`}>
      <div className="card-title">
        {pool.name} <span className="muted">{pool.ip_version}</span>
      </div>
      {u ? (
        <>
          <div className="card-number">
            <BigNum n={u.remaining} /> <span className="muted">of</span> <BigNum n={u.capacity} />
          </div>
          <div className="muted">addresses remaining</div>
          <Meter label={`${pool.name} in use`} share={u.capacity > 0 ? (u.capacity - u.remaining) / u.capacity : 0} />
        </>
      ) : (
        <ErrorText error={utilization.error} />
      )}
    </section>
  )
}

function Meter({ label, share }: { label: string; share: number }) {
  return (
    <div className="meter" role="meter" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(share * 100)} aria-label={label}>
      <div className="meter-fill" style={{ width: `${Math.min(100, share * 100)}%` }} />
    </div>
  )
}
