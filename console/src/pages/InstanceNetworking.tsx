import { useQuery } from '@tanstack/react-query'
import { useRef, useState } from 'react'
import { Link, useParams } from 'react-router'

import { FormModal } from '../components/forms'
import { useToast } from '../components/toast'
import {
  Badge,
  Button,
  ConfirmModal,
  CopyButton,
  ErrorText,
  Field,
  PageHeader,
  StateBadge,
  UpdatedAt,
} from '../components/ui'
import { del, get, getAll, post, seg } from '../lib/api'
import { ipVersionOf } from '../lib/ip'
import { ephemeralDetachVersion, ephemeralSlot, floatingSlot, headerIps } from '../lib/ipSlots'
import { newPollMemory, nextPollInterval } from '../lib/poll'
import { useInvalidate, useSiloPools } from '../lib/queries'
import type { ExternalIp, FloatingIp, Instance, SiloIpPool } from '../lib/types'

const KIND_TIP =
  'Floating IPs can be detached from this instance and attached to another. Ephemeral IPs go back to their pool when detached. SNAT IPs cannot receive traffic: they carry outbound connections only.'

export function InstanceNetworkingPage() {
  const { project, instance: instanceName } = useParams() as { project: string; instance: string }
  const memory = useRef(newPollMemory())
  const instance = useQuery({
    queryKey: ['instances', project, 'one', instanceName],
    queryFn: () => get<Instance>(`/v1/instances/${seg(instanceName)}`, { project }),
    refetchInterval: (q) => {
      const i = q.state.data
      const transitional = i && ['creating', 'starting', 'stopping', 'rebooting', 'migrating'].includes(i.run_state)
      return nextPollInterval(memory.current, transitional ? [`${i.id}:${i.run_state}`] : [], Date.now())
    },
  })
  const ips = useQuery({
    queryKey: ['external-ips', project, instanceName],
    queryFn: () => getAll<ExternalIp>(`/v1/instances/${seg(instanceName)}/external-ips`, { project }),
    refetchInterval: 60_000,
  })
  const floating = useQuery({
    queryKey: ['floating-ips', project, 'all'],
    queryFn: () => getAll<FloatingIp>('/v1/floating-ips', { project }),
  })
  const pools = useSiloPools()
  const [attachingEphemeral, setAttachingEphemeral] = useState(false)
  const [attachingFloating, setAttachingFloating] = useState(false)
  const [detaching, setDetaching] = useState<ExternalIp | null>(null)
  const invalidate = useInvalidate()
  const toast = useToast()
  const refresh = () => invalidate('external-ips', 'floating-ips', 'instances', 'utilization')

  const list = ips.data ?? []
  const poolName = (id: string) => pools.data?.find((p) => p.id === id)?.name ?? id.slice(0, 8)
  const eph = ephemeralSlot(list, pools.data ?? [])
  const flo = floatingSlot(list, floating.data ?? [])
  const header = headerIps(list)
  const i = instance.data

  return (
    <>
      <div className="breadcrumbs">
        <Link to={`/projects/${seg(project)}/instances`}>Instances</Link> / {instanceName}
      </div>
      <PageHeader
        title={instanceName}
        subtitle={
          <span className="instance-facts">
            {i && <StateBadge state={i.run_state} />}
            {header.shown.map((ip) => (
              <span key={ip} className="mono">
                {ip}
              </span>
            ))}
            {header.more && <span title="More addresses in the table below">…</span>}
            <UpdatedAt at={instance.dataUpdatedAt} />
          </span>
        }
      />
      <ErrorText error={instance.error ?? ips.error} />
      <div className="tabs" role="tablist">
        <span role="tab" aria-selected="true" className="tab tab-active">
          Networking
        </span>
      </div>
      <section className="section">
        <div className="section-header">
          <h2>External IPs</h2>
          <div className="section-actions">
            <Button onClick={() => setAttachingEphemeral(true)} disabledReason={eph.disabledReason}>
              Attach ephemeral IP
            </Button>
            <Button variant="primary" onClick={() => setAttachingFloating(true)} disabledReason={flo.disabledReason}>
              Attach floating IP
            </Button>
          </div>
        </div>
        {(eph.disabledReason || flo.disabledReason) && (
          <ul className="reasons" aria-label="Why some actions are not possible">
            {eph.disabledReason && <li>Attach ephemeral IP: {eph.disabledReason}</li>}
            {flo.disabledReason && <li>Attach floating IP: {flo.disabledReason}</li>}
          </ul>
        )}
        <table className="table" aria-label="External IPs">
          <thead>
            <tr>
              <th>IP address</th>
              <th>
                <span title={KIND_TIP}>Kind</span>
              </th>
              <th>Version</th>
              <th>IP pool</th>
              <th>Name</th>
              <th>Description</th>
              <th aria-label="Actions" />
            </tr>
          </thead>
          <tbody>
            {list.map((ip) => (
              <tr key={`${ip.kind}-${ip.ip}`}>
                <td>
                  <span className="mono">{ip.ip}</span> <CopyButton text={ip.ip} label={`Copy ${ip.ip}`} />
                  {ip.kind === 'snat' && (
                    <Badge title="Outbound traffic uses this IP and port range">
                      ports {ip.first_port}–{ip.last_port}
                    </Badge>
                  )}
                </td>
                <td>
                  <Badge tone={ip.kind === 'floating' ? 'blue' : ip.kind === 'ephemeral' ? 'green' : 'neutral'}>
                    {ip.kind}
                  </Badge>
                </td>
                <td>{ipVersionOf(ip.ip)}</td>
                <td>{poolName(ip.ip_pool_id)}</td>
                {ip.kind === 'floating' ? (
                  <>
                    <td className="strong">{ip.name}</td>
                    <td className="muted">{ip.description}</td>
                  </>
                ) : (
                  <td colSpan={2} className="muted" title="Ephemeral and SNAT IPs don't have names or descriptions">
                    —
                  </td>
                )}
                <td className="row-actions">
                  <Button
                    small
                    variant="ghost"
                    label={`Detach ${ip.ip}`}
                    onClick={() => setDetaching(ip)}
                    disabledReason={ip.kind === 'snat' ? "SNAT IPs can't be detached" : undefined}
                  >
                    Detach
                  </Button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>

      {attachingEphemeral && i && (
        <AttachEphemeral
          instance={i}
          pools={eph.pools}
          preselected={eph.preselected}
          note={eph.note}
          onClose={() => setAttachingEphemeral(false)}
          onAttached={(ip) => {
            toast(`Ephemeral IP ${ip} attached to instance ${i.name}`)
            refresh()
          }}
        />
      )}
      {attachingFloating && i && (
        <AttachFloating
          instance={i}
          candidates={flo.candidates}
          poolName={poolName}
          onClose={() => setAttachingFloating(false)}
          onAttached={(f) => {
            toast(`Floating IP ${f.name} attached to instance ${i.name}`)
            refresh()
          }}
        />
      )}
      {detaching && i && (
        <ConfirmModal
          title={detaching.kind === 'floating' ? 'Detach floating IP' : 'Detach ephemeral IP'}
          confirmLabel="Detach"
          onClose={() => setDetaching(null)}
          onConfirm={async () => {
            if (detaching.kind === 'floating') {
              await post(`/v1/floating-ips/${seg(detaching.id)}/detach`)
              toast(`Floating IP ${detaching.name} detached`)
            } else {
              await del(`/v1/instances/${seg(i.id)}/external-ips/ephemeral`, {
                ip_version: ephemeralDetachVersion(list, detaching.ip),
              })
              toast(`Ephemeral IP ${detaching.ip} detached`)
            }
            await refresh()
          }}
        >
          {detaching.kind === 'floating' ? (
            <>
              Are you sure you want to detach floating IP <strong>{detaching.name}</strong> from instance{' '}
              <strong>{i.name}</strong>? The instance will no longer be reachable at{' '}
              <strong className="mono">{detaching.ip}</strong>.
            </>
          ) : (
            <>
              Are you sure you want to detach ephemeral IP <strong className="mono">{detaching.ip}</strong> from instance{' '}
              <strong>{i.name}</strong>? The address goes back to its pool: the instance will no longer be reachable at
              it, and may not get it back.
            </>
          )}
        </ConfirmModal>
      )}
    </>
  )
}

function AttachEphemeral(props: {
  instance: Instance
  pools: SiloIpPool[]
  preselected?: SiloIpPool
  note?: string
  onClose: () => void
  onAttached: (ip: string) => void
}) {
  const [pool, setPool] = useState(props.preselected?.name ?? '')
  const [touched, setTouched] = useState(false)
  return (
    <FormModal
      title="Attach ephemeral IP"
      submitLabel="Attach"
      onClose={props.onClose}
      validate={() => {
        setTouched(true)
        return pool !== ''
      }}
      onSubmit={async () => {
        const ip = await post<ExternalIp>(`/v1/instances/${seg(props.instance.id)}/external-ips/ephemeral`, {
          pool_selector: { type: 'explicit', pool },
        })
        props.onAttached(ip.ip)
      }}
    >
      <Field label="Pool" error={touched && !pool ? 'Pool is required' : undefined} hint={props.note}>
        {(id, describedBy) => (
          <select id={id} aria-describedby={describedBy} value={pool} onChange={(e) => setPool(e.target.value)}>
            <option value="">Select a pool</option>
            {props.pools.map((p) => (
              <option key={p.id} value={p.name}>
                {p.name} ({p.ip_version}){p.is_default ? ' · default' : ''}
              </option>
            ))}
          </select>
        )}
      </Field>
      <p className="info">An address of the pool is taken for this instance and goes back to the pool when detached.</p>
    </FormModal>
  )
}

function AttachFloating(props: {
  instance: Instance
  candidates: FloatingIp[]
  poolName: (id: string) => string
  onClose: () => void
  onAttached: (f: FloatingIp) => void
}) {
  const [chosen, setChosen] = useState(props.candidates[0]?.id ?? '')
  const ip = props.candidates.find((f) => f.id === chosen)
  return (
    <FormModal
      title="Attach floating IP"
      submitLabel="Attach"
      onClose={props.onClose}
      validate={() => !!ip}
      onSubmit={async () => {
        await post(`/v1/floating-ips/${seg(chosen)}/attach`, { kind: 'instance', parent: props.instance.id })
        props.onAttached(ip!)
      }}
    >
      <Field label="Floating IP">
        {(id) => (
          <select id={id} value={chosen} onChange={(e) => setChosen(e.target.value)}>
            {props.candidates.map((f) => (
              <option key={f.id} value={f.id}>
                {f.name} {f.ip} / {props.poolName(f.ip_pool_id)}
                {f.description ? ` / ${f.description}` : ''}
              </option>
            ))}
          </select>
        )}
      </Field>
      {ip && (
        <p className="info">
          Instance <strong>{props.instance.name}</strong> will be reachable at <strong className="mono">{ip.ip}</strong>.
        </p>
      )}
      <ErrorText error={null} />
    </FormModal>
  )
}
