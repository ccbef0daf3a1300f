import { useQuery } from '@tanstack/react-query'

import { BigNum, EmptyState, ErrorText, PageHeader } from '../components/ui'
import { get, seg } from '../lib/api'
import { useMe, useSiloPools, useSystemPools } from '../lib/queries'
import type { IpPool, IpPoolUtilization } from '../lib/types'

/**
 * The addresses left in each pool. A fleet admin sees every pool's count; a silo's users see the
 * pools they may allocate from (a count of the silo's own use needs an API the server does
 * not have yet: issue 25).
 */
export function UtilizationPage() {
  const me = useMe()
  const fleet = me.data?.fleet_viewer ?? false
  const system = useSystemPools(fleet)
  const silo = useSiloPools()
  const pools: IpPool[] = fleet ? (system.data ?? []) : (silo.data ?? [])
  return (
    <>
      <PageHeader
        title="Utilization"
        subtitle={fleet ? 'Addresses left in every IP pool of the fleet.' : `IP pools your silo ${me.data?.silo_name ?? ''} can use.`}
      />
      <ErrorText error={fleet ? system.error : silo.error} />
      {pools.length === 0 && (fleet ? system.isSuccess : silo.isSuccess) ? (
        <EmptyState title="No IP pools">An operator creates pools and links them to silos.</EmptyState>
      ) : (
        <div className="cards">
          {pools.map((p) => (
            <PoolCard key={p.id} pool={p} fleet={fleet} />
          ))}
        </div>
      )}
    </>
  )
}

function PoolCard({ pool, fleet }: { pool: IpPool; fleet: boolean }) {
  const utilization = useQuery({
    queryKey: ['utilization', pool.id],
    queryFn: () => get<IpPoolUtilization>(`/v1/system/ip-pools/${seg(pool.id)}/utilization`),
    enabled: fleet,
  })
  const u = utilization.data
  const used = u ? u.capacity - u.remaining : 0
  const share = u && u.capacity > 0 ? used / u.capacity : 0
  return (
    <section className="card" aria-label={`Pool ${pool.name}`}>
      <div className="card-title">
        {pool.name} <span className="muted">{pool.ip_version}</span>
      </div>
      {fleet ? (
        u ? (
          <>
            <div className="card-number">
              <BigNum n={u.remaining} /> <span className="muted">of</span> <BigNum n={u.capacity} />
            </div>
            <div className="muted">addresses remaining</div>
            <div className="meter" role="meter" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(share * 100)} aria-label={`${pool.name} in use`}>
              <div className="meter-fill" style={{ width: `${Math.min(100, share * 100)}%` }} />
            </div>
          </>
        ) : (
          <ErrorText error={utilization.error} />
        )
      ) : (
        <div className="muted">{pool.description || 'Linked to your silo'}</div>
      )}
    </section>
  )
}
