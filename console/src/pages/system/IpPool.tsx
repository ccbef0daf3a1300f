import { useQuery } from '@tanstack/react-query'
import { useState } from 'react'
import { Link, useNavigate, useParams, useSearchParams } from 'react-router'

import { FormModal } from '../../components/forms'
import { useToast } from '../../components/toast'
import { Badge, Button, ConfirmModal, EmptyState, ErrorText, Field, PageHeader, Pager, Tabs, formatTime } from '../../components/ui'
import { del, get, getAll, post, put, seg } from '../../lib/api'
import { rangeErrors } from '../../lib/ip'
import { useInvalidate, usePagedList } from '../../lib/queries'
import type { IpPool, IpPoolRange, IpPoolSiloLink, PoolAddress, Silo, SiloIpPoolLink } from '../../lib/types'
import { Remaining } from './IpPools'

export const DELETE_WITH_RANGES_REASON = 'IP pool cannot be deleted while it contains IP ranges'

export function IpPoolPage() {
  const name = useParams().pool!
  const [params, setParams] = useSearchParams()
  const tab = params.get('tab') === 'silos' ? 'silos' : params.get('tab') === 'addresses' ? 'addresses' : 'ranges'
  const pool = useQuery({ queryKey: ['system-ip-pools', 'one', name], queryFn: () => get<IpPool>(`/v1/system/ip-pools/${seg(name)}`) })
  const ranges = useQuery({
    queryKey: ['system-ip-pools', 'ranges', name],
    queryFn: () => getAll<IpPoolRange>(`/v1/system/ip-pools/${seg(name)}/ranges`),
  })
  const links = useQuery({
    queryKey: ['system-ip-pools', 'silos', name],
    queryFn: () => getAll<IpPoolSiloLink>(`/v1/system/ip-pools/${seg(name)}/silos`),
  })
  const silos = useQuery({ queryKey: ['silos', 'all'], queryFn: () => getAll<Silo>('/v1/system/silos') })
  const siloName = (id: string) => silos.data?.find((s) => s.id === id)?.name ?? id.slice(0, 8)
  const [adding, setAdding] = useState(false)
  const [removing, setRemoving] = useState<IpPoolRange | null>(null)
  const [linking, setLinking] = useState(false)
  const [unlinking, setUnlinking] = useState<IpPoolSiloLink | null>(null)
  const [defaulting, setDefaulting] = useState<IpPoolSiloLink | null>(null)
  const [deleting, setDeleting] = useState(false)
  const invalidate = useInvalidate()
  const toast = useToast()
  const navigate = useNavigate()
  const refresh = () => invalidate('system-ip-pools', 'utilization', 'ip-pools', 'silo-pools')
  const p = pool.data

  return (
    <>
      <div className="breadcrumbs">
        <Link to="/system/ip-pools">IP pools</Link> / {name}
      </div>
      <PageHeader
        title={name}
        subtitle={p?.description}
        actions={
          <Button
            variant="danger"
            onClick={() => setDeleting(true)}
            disabledReason={ranges.data && ranges.data.length > 0 ? DELETE_WITH_RANGES_REASON : undefined}
          >
            Delete pool
          </Button>
        }
      />
      <ErrorText error={pool.error} />
      {p && (
        <dl className="properties properties-row">
          <dt>ID</dt>
          <dd className="mono">{p.id}</dd>
          <dt>Version</dt>
          <dd>{p.ip_version}</dd>
          <dt>Type</dt>
          <dd>{p.pool_type ?? 'unicast'}</dd>
          <dt>IPs remaining</dt>
          <dd>
            <Remaining pool={p.id} />
          </dd>
        </dl>
      )}
      <Tabs
        tabs={[
          { id: 'ranges', label: 'IP ranges' },
          { id: 'silos', label: 'Linked silos' },
          { id: 'addresses', label: 'Allocated addresses' },
        ]}
        current={tab}
        onChange={(t) => setParams(t === 'ranges' ? {} : { tab: t })}
      />
      {tab === 'addresses' ? (
        <Addresses pool={name} />
      ) : tab === 'ranges' ? (
        <section className="section">
          <div className="section-header">
            <h2>IP ranges</h2>
            <Button variant="primary" onClick={() => setAdding(true)} disabled={!p}>
              Add range
            </Button>
          </div>
          <ErrorText error={ranges.error} />
          {ranges.data && ranges.data.length === 0 ? (
            <EmptyState title="No ranges">Add a range of addresses for this pool to hand out.</EmptyState>
          ) : (
            <table className="table" aria-label="IP ranges">
              <thead>
                <tr>
                  <th>First</th>
                  <th>Last</th>
                  <th>Added</th>
                  <th aria-label="Actions" />
                </tr>
              </thead>
              <tbody>
                {ranges.data?.map((r) => (
                  <tr key={r.id}>
                    <td className="mono">{r.range.first}</td>
                    <td className="mono">{r.range.last}</td>
                    <td className="muted">{formatTime(r.time_created)}</td>
                    <td className="row-actions">
                      <Button small variant="ghost" label={`Remove ${r.range.first}–${r.range.last}`} onClick={() => setRemoving(r)}>
                        Remove
                      </Button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </section>
      ) : (
        <section className="section">
          <div className="section-header">
            <h2>Linked silos</h2>
            <Button variant="primary" onClick={() => setLinking(true)} disabled={!p}>
              Link silo
            </Button>
          </div>
          <ErrorText error={links.error} />
          {links.data && links.data.length === 0 ? (
            <EmptyState title="No linked silos">A silo can allocate from this pool once linked to it.</EmptyState>
          ) : (
            <table className="table" aria-label="Linked silos">
              <thead>
                <tr>
                  <th>Silo</th>
                  <th>Default</th>
                  <th aria-label="Actions" />
                </tr>
              </thead>
              <tbody>
                {links.data?.map((l) => (
                  <tr key={l.silo_id}>
                    <td className="strong">{siloName(l.silo_id)}</td>
                    <td>{l.is_default ? <Badge tone="green">default</Badge> : <span className="muted">—</span>}</td>
                    <td className="row-actions">
                      <Button small variant="ghost" onClick={() => setDefaulting(l)}>
                        {l.is_default ? 'Clear default' : 'Make default'}
                      </Button>
                      <Button small variant="ghost" label={`Unlink ${siloName(l.silo_id)}`} onClick={() => setUnlinking(l)}>
                        Unlink
                      </Button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </section>
      )}

      {adding && p && (
        <AddRange
          pool={p}
          onClose={() => setAdding(false)}
          onAdded={(first, last) => {
            toast(`Range ${first}–${last} added to ${p.name}`)
            refresh()
          }}
        />
      )}
      {removing && (
        <ConfirmModal
          title="Remove IP range"
          confirmLabel="Remove"
          onClose={() => setRemoving(null)}
          onConfirm={async () => {
            await post(`/v1/system/ip-pools/${seg(name)}/ranges/remove`, removing.range)
            toast(`Range ${removing.range.first}–${removing.range.last} removed from ${name}`)
            await refresh()
          }}
        >
          Are you sure you want to remove range <strong className="mono">{removing.range.first}</strong>–
          <strong className="mono">{removing.range.last}</strong> from pool <strong>{name}</strong>? No new address
          will come from it.
        </ConfirmModal>
      )}
      {linking && p && (
        <LinkSilo
          pool={p}
          silos={silos.data ?? []}
          linked={new Set(links.data?.map((l) => l.silo_id))}
          onClose={() => setLinking(false)}
          onLinked={(silo) => {
            toast(`Pool ${p.name} linked to silo ${silo}`)
            refresh()
          }}
        />
      )}
      {defaulting && p && (
        <DefaultChange
          pool={p}
          link={defaulting}
          siloName={siloName(defaulting.silo_id)}
          onClose={() => setDefaulting(null)}
          onDone={(text) => {
            toast(text)
            refresh()
          }}
        />
      )}
      {unlinking && (
        <ConfirmModal
          title="Unlink silo"
          confirmLabel="Unlink"
          onClose={() => setUnlinking(null)}
          onConfirm={async () => {
            await del(`/v1/system/ip-pools/${seg(name)}/silos/${seg(unlinking.silo_id)}`)
            toast(`Pool ${name} unlinked from silo ${siloName(unlinking.silo_id)}`)
            await refresh()
          }}
        >
          Are you sure you want to unlink silo <strong>{siloName(unlinking.silo_id)}</strong> from pool{' '}
          <strong>{name}</strong>? Its users can no longer allocate addresses from it.
        </ConfirmModal>
      )}
      {deleting && (
        <ConfirmModal
          title="Delete IP pool"
          confirmLabel="Delete"
          onClose={() => setDeleting(false)}
          onConfirm={async () => {
            await del(`/v1/system/ip-pools/${seg(name)}`)
            toast(`IP pool ${name} deleted`)
            await refresh()
            navigate('/system/ip-pools')
          }}
        >
          Are you sure you want to delete IP pool <strong>{name}</strong>?
        </ConfirmModal>
      )}
    </>
  )
}

function AddRange(props: { pool: IpPool; onClose: () => void; onAdded: (first: string, last: string) => void }) {
  const [first, setFirst] = useState('')
  const [last, setLast] = useState('')
  const [touched, setTouched] = useState(false)
  const errors = touched ? rangeErrors(first, last, props.pool.ip_version) : {}
  return (
    <FormModal
      title="Add IP range"
      submitLabel="Add range"
      onClose={props.onClose}
      validate={() => {
        setTouched(true)
        const e = rangeErrors(first, last, props.pool.ip_version)
        return !e.first && !e.last
      }}
      onSubmit={async () => {
        await post(`/v1/system/ip-pools/${seg(props.pool.name)}/ranges/add`, { first: first.trim(), last: last.trim() })
        props.onAdded(first.trim(), last.trim())
      }}
    >
      <p className="info">Ranges are inclusive, and first must be less than or equal to last.</p>
      <Field label="First" error={errors.first}>
        {(id, d) => <input id={id} aria-describedby={d} className="mono" value={first} onChange={(e) => setFirst(e.target.value)} />}
      </Field>
      <Field label="Last" error={errors.last}>
        {(id, d) => <input id={id} aria-describedby={d} className="mono" value={last} onChange={(e) => setLast(e.target.value)} />}
      </Field>
    </FormModal>
  )
}

/** The silo's default pool of `pool`'s version, other than `pool`: what a new default replaces. */
function useReplacedDefault(pool: IpPool, silo: string) {
  return useQuery({
    queryKey: ['silo-pools', silo],
    queryFn: () => getAll<SiloIpPoolLink>(`/v1/system/silos/${seg(silo)}/ip-pools`),
    enabled: silo !== '',
    select: (list) => list.find((p) => p.is_default && p.ip_version === pool.ip_version && p.id !== pool.id),
  })
}

function LinkSilo(props: {
  pool: IpPool
  silos: Silo[]
  linked: Set<string>
  onClose: () => void
  onLinked: (silo: string) => void
}) {
  const candidates = props.silos.filter((s) => !props.linked.has(s.id))
  const [silo, setSilo] = useState(candidates[0]?.name ?? '')
  const [isDefault, setIsDefault] = useState(false)
  const replaced = useReplacedDefault(props.pool, silo)
  return (
    <FormModal
      title={`Link pool ${props.pool.name} to a silo`}
      submitLabel="Link"
      onClose={props.onClose}
      validate={() => silo !== ''}
      onSubmit={async () => {
        // The server links a pool as a silo's default only where the silo has none of its
        // version; to replace one, the pool is linked first, then made the default (which
        // clears the old one's flag in the same change).
        const replacing = isDefault && replaced.data !== undefined
        await post(`/v1/system/ip-pools/${seg(props.pool.name)}/silos`, { silo, is_default: isDefault && !replacing })
        if (replacing) {
          await put(`/v1/system/ip-pools/${seg(props.pool.name)}/silos/${seg(silo)}`, { is_default: true })
        }
        props.onLinked(silo)
      }}
    >
      {candidates.length === 0 ? (
        <p>Every silo is linked to this pool already.</p>
      ) : (
        <>
          <Field label="Silo">
            {(id) => (
              <select id={id} value={silo} onChange={(e) => setSilo(e.target.value)}>
                {candidates.map((s) => (
                  <option key={s.id} value={s.name}>
                    {s.name}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <label className="checkbox">
            <input type="checkbox" checked={isDefault} onChange={(e) => setIsDefault(e.target.checked)} /> Make it the
            silo’s default {props.pool.ip_version} pool
          </label>
          {isDefault && replaced.data && (
            <p className="info">
              Replaces <strong>{replaced.data.name}</strong>, which stays linked.
            </p>
          )}
        </>
      )}
    </FormModal>
  )
}

function DefaultChange(props: {
  pool: IpPool
  link: IpPoolSiloLink
  siloName: string
  onClose: () => void
  onDone: (text: string) => void
}) {
  const makeDefault = !props.link.is_default
  const replaced = useReplacedDefault(props.pool, makeDefault ? props.link.silo_id : '')
  return (
    <ConfirmModal
      title={makeDefault ? 'Make default pool' : 'Clear default pool'}
      confirmLabel={makeDefault ? 'Make default' : 'Clear default'}
      destructive={!makeDefault}
      onClose={props.onClose}
      onConfirm={async () => {
        await put(`/v1/system/ip-pools/${seg(props.pool.name)}/silos/${seg(props.link.silo_id)}`, { is_default: makeDefault })
        props.onDone(
          makeDefault
            ? `${props.pool.name} is now the default ${props.pool.ip_version} pool of silo ${props.siloName}`
            : `${props.pool.name} is no longer a default pool of silo ${props.siloName}`,
        )
      }}
    >
      {makeDefault ? (
        <>
          Make <strong>{props.pool.name}</strong> the default {props.pool.ip_version} pool of silo{' '}
          <strong>{props.siloName}</strong>?{' '}
          {replaced.data ? (
            <>
              Replaces <strong>{replaced.data.name}</strong>, which stays linked.
            </>
          ) : (
            'The silo has no default pool of this version now.'
          )}
        </>
      ) : (
        <>
          Clear <strong>{props.pool.name}</strong> as the default pool of silo <strong>{props.siloName}</strong>? Requests
          that name no pool will fail until another default is set.
        </>
      )}
    </ConfirmModal>
  )
}

/** Who holds which address of the pool, in address order (floatplane's extension). */
function Addresses({ pool }: { pool: string }) {
  const list = usePagedList<PoolAddress>(['system-ip-pools', 'addresses', pool], `/v1/system/ip-pools/${seg(pool)}/addresses`)
  return (
    <section className="section">
      <div className="section-header">
        <h2>Allocated addresses</h2>
      </div>
      <ErrorText error={list.error} />
      {list.isSuccess && list.items.length === 0 ? (
        <EmptyState title="No address of this pool is allocated">Its ranges can be removed.</EmptyState>
      ) : (
        <table className="table" aria-label="Allocated addresses">
          <thead>
            <tr>
              <th>IP address</th>
              <th>Kind</th>
              <th>Held by</th>
              <th>Project</th>
              <th>Silo</th>
              <th>Allocated</th>
            </tr>
          </thead>
          <tbody>
            {list.items.map((a) => (
              <tr key={a.external_ip_id}>
                <td>
                  <span className="mono">{a.ip}</span>
                  {a.kind === 'snat' && (
                    <Badge title="Outbound traffic uses this IP and port range">
                      ports {a.first_port}–{a.last_port}
                    </Badge>
                  )}
                </td>
                <td>
                  <Badge tone={a.kind === 'floating' ? 'blue' : a.kind === 'ephemeral' ? 'green' : 'neutral'}>{a.kind}</Badge>
                </td>
                <td>
                  {a.name && <div className="strong">{a.name}</div>}
                  {a.instance_name ? (
                    <div className={a.name ? 'muted small' : undefined}>instance {a.instance_name}</div>
                  ) : (
                    !a.name && <span className="muted">—</span>
                  )}
                </td>
                <td>{a.project_name ?? '—'}</td>
                <td>{a.silo_name ?? '—'}</td>
                <td className="muted">{formatTime(a.time_created)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager hasPrev={list.hasPrev} hasNext={list.hasNext} onPrev={list.prev} onNext={list.next} count={list.items.length} />
    </section>
  )
}
