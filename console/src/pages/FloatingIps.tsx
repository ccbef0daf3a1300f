import { useQuery } from '@tanstack/react-query'
import { useState } from 'react'
import { Link, useParams } from 'react-router'

import { DescriptionField, FormModal, NameField } from '../components/forms'
import { useToast } from '../components/toast'
import {
  Button,
  ConfirmModal,
  CopyButton,
  EmptyState,
  ErrorText,
  Field,
  PageHeader,
  Pager,
  UpdatedAt,
} from '../components/ui'
import { del, getAll, post, put, seg } from '../lib/api'
import { addressChangeBlocked } from '../lib/instances'
import { parseIp } from '../lib/ip'
import { nameError } from '../lib/names'
import { useInvalidate, usePagedList, useProjectInstances, useSiloPools } from '../lib/queries'
import type { FloatingIp, Instance, Project, SiloIpPool } from '../lib/types'

export const DELETE_ATTACHED_REASON = 'This floating IP must be detached from the instance before it can be deleted'

export function FloatingIpsPage() {
  const project = useParams().project!
  const list = usePagedList<FloatingIp>(['floating-ips', project], '/v1/floating-ips', { project }, 60_000)
  const pools = useSiloPools()
  const instances = useProjectInstances(project)
  const poolName = (id: string) => pools.data?.find((p) => p.id === id)?.name ?? id.slice(0, 8)
  const instanceOf = (id: string | null) => (id ? instances.data?.find((i) => i.id === id) : undefined)
  const [creating, setCreating] = useState(false)
  const [editing, setEditing] = useState<FloatingIp | null>(null)
  const [attaching, setAttaching] = useState<FloatingIp | null>(null)
  const [reassigning, setReassigning] = useState<FloatingIp | null>(null)
  const [detaching, setDetaching] = useState<FloatingIp | null>(null)
  const [deleting, setDeleting] = useState<FloatingIp | null>(null)
  const [moving, setMoving] = useState<FloatingIp | null>(null)
  const invalidate = useInvalidate()
  const toast = useToast()
  const refresh = () => invalidate('floating-ips', 'instances', 'external-ips', 'utilization')

  return (
    <>
      <PageHeader
        title="Floating IPs"
        subtitle={
          <>
            Addresses of project <strong>{project}</strong> that stay the same while they move between
            instances. <UpdatedAt at={list.dataUpdatedAt} />
          </>
        }
        actions={
          <Button variant="primary" onClick={() => setCreating(true)}>
            New floating IP
          </Button>
        }
      />
      <ErrorText error={list.error} />
      {list.isSuccess && list.items.length === 0 ? (
        <EmptyState title="No floating IPs">
          A floating IP keeps its address when it moves from one instance to another.
        </EmptyState>
      ) : (
        <table className="table" aria-label="Floating IPs">
          <thead>
            <tr>
              <th>Name</th>
              <th>Description</th>
              <th>IP address</th>
              <th>IP pool</th>
              <th>Instance</th>
              <th aria-label="Actions" />
            </tr>
          </thead>
          <tbody>
            {list.items.map((f) => {
              const instance = instanceOf(f.instance_id)
              return (
                <tr key={f.id}>
                  <td>
                    <button type="button" className="link strong" onClick={() => setEditing(f)}>
                      {f.name}
                    </button>
                  </td>
                  <td className="muted">{f.description}</td>
                  <td>
                    <span className="mono">{f.ip}</span> <CopyButton text={f.ip} label={`Copy ${f.ip}`} />
                  </td>
                  <td>{poolName(f.ip_pool_id)}</td>
                  <td>
                    {instance ? (
                      <Link to={`/projects/${seg(project)}/instances/${seg(instance.name)}/networking`}>
                        {instance.name}
                      </Link>
                    ) : f.instance_id ? (
                      <span className="mono muted small">{f.instance_id}</span>
                    ) : (
                      <span className="muted">—</span>
                    )}
                  </td>
                  <td className="row-actions">
                    <Button small variant="ghost" onClick={() => setEditing(f)} label={`Edit ${f.name}`}>
                      Edit
                    </Button>
                    {f.instance_id ? (
                      <>
                        <Button small variant="ghost" onClick={() => setDetaching(f)} label={`Detach ${f.name}`}>
                          Detach
                        </Button>
                        <Button small variant="ghost" onClick={() => setReassigning(f)} label={`Reassign ${f.name}`}>
                          Reassign
                        </Button>
                      </>
                    ) : (
                      <Button small variant="ghost" onClick={() => setAttaching(f)} label={`Attach ${f.name}`}>
                        Attach
                      </Button>
                    )}
                    <Button
                      small
                      variant="ghost"
                      onClick={() => setMoving(f)}
                      label={`Move ${f.name}`}
                      disabledReason={f.instance_id ? 'Detach this floating IP before moving it to another project' : undefined}
                    >
                      Move
                    </Button>
                    <Button
                      small
                      variant="ghost"
                      onClick={() => setDeleting(f)}
                      label={`Delete ${f.name}`}
                      disabledReason={f.instance_id ? DELETE_ATTACHED_REASON : undefined}
                    >
                      Delete
                    </Button>
                  </td>
                </tr>
              )
            })}
          </tbody>
        </table>
      )}
      <Pager hasPrev={list.hasPrev} hasNext={list.hasNext} onPrev={list.prev} onNext={list.next} count={list.items.length} />

      {creating && (
        <CreateFloatingIp
          project={project}
          pools={pools.data ?? []}
          onClose={() => setCreating(false)}
          onCreated={(f) => {
            toast(`Floating IP ${f.name} created: ${f.ip}`)
            refresh()
          }}
        />
      )}
      {editing && (
        <EditFloatingIp
          ip={editing}
          poolName={poolName(editing.ip_pool_id)}
          instanceName={instanceOf(editing.instance_id)?.name}
          onClose={() => setEditing(null)}
          onSaved={(f) => {
            toast(`Floating IP ${f.name} updated`)
            refresh()
          }}
        />
      )}
      {attaching && (
        <AttachFloatingIp
          ip={attaching}
          instances={instances.data}
          onClose={() => setAttaching(null)}
          onAttached={(i) => {
            toast(`Floating IP ${attaching.name} attached to instance ${i.name}`)
            refresh()
          }}
        />
      )}
      {reassigning && (
        <AttachFloatingIp
          ip={reassigning}
          instances={instances.data}
          from={instanceOf(reassigning.instance_id)?.name ?? reassigning.instance_id ?? undefined}
          onClose={() => setReassigning(null)}
          onAttached={(i) => {
            toast(`Floating IP ${reassigning.name} moved to instance ${i.name}`)
            refresh()
          }}
        />
      )}
      {detaching && (
        <ConfirmModal
          title="Detach floating IP"
          confirmLabel="Detach"
          onClose={() => setDetaching(null)}
          onConfirm={async () => {
            await post(`/v1/floating-ips/${seg(detaching.id)}/detach`)
            toast(`Floating IP ${detaching.name} detached`)
            await refresh()
          }}
        >
          Are you sure you want to detach floating IP <strong>{detaching.name}</strong> from instance{' '}
          <strong>{instanceOf(detaching.instance_id)?.name ?? detaching.instance_id}</strong>? The instance will no
          longer be reachable at <strong className="mono">{detaching.ip}</strong>.
        </ConfirmModal>
      )}
      {moving && (
        <MoveFloatingIp
          ip={moving}
          project={project}
          onClose={() => setMoving(null)}
          onMoved={(to) => {
            toast(`Floating IP ${moving.name} moved to project ${to}`)
            refresh()
          }}
        />
      )}
      {deleting && (
        <ConfirmModal
          title="Delete floating IP"
          confirmLabel="Delete"
          onClose={() => setDeleting(null)}
          onConfirm={async () => {
            await del(`/v1/floating-ips/${seg(deleting.id)}`)
            toast(`Floating IP ${deleting.name} deleted`)
            await refresh()
          }}
        >
          Are you sure you want to delete floating IP <strong>{deleting.name}</strong>? Its address{' '}
          <strong className="mono">{deleting.ip}</strong> goes back to its pool, and another project may take it.
        </ConfirmModal>
      )}
    </>
  )
}

/** The pool to preselect: only when exactly one unicast default exists (CON-10). */
export function preselectedPool(pools: SiloIpPool[]): SiloIpPool | undefined {
  const defaults = pools.filter((p) => p.is_default && (p.pool_type ?? 'unicast') === 'unicast')
  return defaults.length === 1 ? defaults[0] : undefined
}

function CreateFloatingIp(props: {
  project: string
  pools: SiloIpPool[]
  onClose: () => void
  onCreated: (f: FloatingIp) => void
}) {
  const unicast = props.pools.filter((p) => (p.pool_type ?? 'unicast') === 'unicast')
  const [name, setName] = useState('')
  const [description, setDescription] = useState('')
  const [pool, setPool] = useState(preselectedPool(unicast)?.name ?? '')
  const [ip, setIp] = useState('')
  const [touched, setTouched] = useState(false)
  const selected = unicast.find((p) => p.name === pool)
  // With an address, its pool is the one whose range holds it (pools never overlap): the
  // picker then only checks the version.
  const explicit = ip.trim() !== ''
  const poolError = touched && !selected && !explicit ? 'Pool is required' : undefined
  let ipError: string | undefined
  if (explicit) {
    const parsed = parseIp(ip.trim())
    if (!parsed) ipError = 'Not a valid IP address'
    else if (selected && parsed.version !== selected.ip_version) {
      ipError = `An ${parsed.version === 'v4' ? 'IPv4' : 'IPv6'} address is not in ${selected.name}, an ${selected.ip_version === 'v4' ? 'IPv4' : 'IPv6'} pool`
    }
  }
  return (
    <FormModal
      title="Create floating IP"
      submitLabel="Create floating IP"
      onClose={props.onClose}
      validate={() => {
        setTouched(true)
        return !nameError(name) && (!!selected || explicit) && !ipError
      }}
      onSubmit={async () => {
        const address_allocator = ip.trim()
          ? { type: 'explicit', ip: ip.trim() }
          : { type: 'auto', pool_selector: { type: 'explicit', pool } }
        const created = await post<FloatingIp>('/v1/floating-ips', { name, description, address_allocator }, {
          project: props.project,
        })
        props.onCreated(created)
      }}
    >
      <NameField value={name} onChange={(v) => (setName(v), setTouched(true))} touched={touched} />
      <DescriptionField value={description} onChange={setDescription} />
      <Field label="Pool" error={poolError}>
        {(id, describedBy) => (
          <select id={id} aria-describedby={describedBy} value={pool} onChange={(e) => setPool(e.target.value)}>
            <option value="">Select a pool</option>
            {unicast.map((p) => (
              <option key={p.id} value={p.name}>
                {p.name} ({p.ip_version}){p.is_default ? ' · default' : ''}
              </option>
            ))}
          </select>
        )}
      </Field>
      <Field
        label="IP address (optional)"
        error={ipError}
        hint="Leave empty to take the pool’s next free address. A given address comes from the pool whose range holds it."
      >
        {(id, describedBy) => (
          <input
            id={id}
            aria-describedby={describedBy}
            className="mono"
            value={ip}
            placeholder={selected?.ip_version === 'v6' ? 'fd00::10' : '192.0.2.10'}
            onChange={(e) => setIp(e.target.value)}
          />
        )}
      </Field>
    </FormModal>
  )
}

function EditFloatingIp(props: {
  ip: FloatingIp
  poolName: string
  instanceName?: string
  onClose: () => void
  onSaved: (f: FloatingIp) => void
}) {
  const [name, setName] = useState(props.ip.name)
  const [description, setDescription] = useState(props.ip.description)
  const [touched, setTouched] = useState(false)
  return (
    <FormModal
      title="Edit floating IP"
      submitLabel="Save"
      onClose={props.onClose}
      validate={() => {
        setTouched(true)
        return !nameError(name)
      }}
      onSubmit={async () => {
        const saved = await put<FloatingIp>(`/v1/floating-ips/${seg(props.ip.id)}`, { name, description })
        props.onSaved(saved)
      }}
    >
      <dl className="properties">
        <dt>IP address</dt>
        <dd className="mono">{props.ip.ip}</dd>
        <dt>IP pool</dt>
        <dd>{props.poolName}</dd>
        <dt>Instance</dt>
        <dd>{props.instanceName ?? '—'}</dd>
      </dl>
      <NameField value={name} onChange={(v) => (setName(v), setTouched(true))} touched={touched} />
      <DescriptionField value={description} onChange={setDescription} />
    </FormModal>
  )
}

/**
 * Attaches a floating IP to an instance of its project; with `from` (the instance holding it),
 * moves it there in one step (`allow_reassociation`), never through detached.
 */
export function AttachFloatingIp(props: {
  ip: FloatingIp
  /** Undefined while they load. */
  instances: Instance[] | undefined
  /** The name of the instance the floating IP is attached to: a move. */
  from?: string
  onClose: () => void
  onAttached: (i: Instance) => void
}) {
  const moving = props.from !== undefined
  const live = (props.instances ?? []).filter(
    (i) => i.run_state !== 'destroyed' && !(moving && i.id === props.ip.instance_id),
  )
  const firstFree = live.find((i) => !addressChangeBlocked(i.run_state))
  const [picked, setInstanceId] = useState('')
  // Until the user picks one, the first instance that can take an address now.
  const instanceId = picked || firstFree?.id || ''
  const chosen = live.find((i) => i.id === instanceId)
  return (
    <FormModal
      title={moving ? `Reassign floating IP ${props.ip.name}` : `Attach floating IP ${props.ip.name}`}
      submitLabel={moving ? 'Reassign' : 'Attach'}
      onClose={props.onClose}
      validate={() => !!chosen}
      onSubmit={async () => {
        await post(`/v1/floating-ips/${seg(props.ip.id)}/attach`, {
          kind: 'instance',
          parent: instanceId,
          ...(moving ? { allow_reassociation: true } : {}),
        })
        props.onAttached(chosen!)
      }}
    >
      {moving && (
        <p>
          The address moves from instance <strong>{props.from}</strong> to the one you pick in one step: the switches
          send it to the new instance at once, and connections to <strong>{props.from}</strong> through it end.
        </p>
      )}
      {props.instances === undefined ? (
        <p className="muted">Loading the project’s instances…</p>
      ) : live.length === 0 ? (
        <p>This project has no {moving ? 'other ' : ''}instances to attach the floating IP to.</p>
      ) : (
        <fieldset className="picker">
          <legend>Instance</legend>
          {live.map((i) => {
            const blocked = addressChangeBlocked(i.run_state)
            return (
              <label key={i.id} className={`picker-row${blocked ? ' picker-disabled' : ''}`}>
                <input
                  type="radio"
                  name="instance"
                  value={i.id}
                  checked={instanceId === i.id}
                  disabled={!!blocked}
                  onChange={() => setInstanceId(i.id)}
                />
                <span className="picker-name">{i.name}</span>
                <span className="picker-state">{i.run_state}</span>
                {blocked && <span className="picker-reason">{blocked}</span>}
              </label>
            )
          })}
        </fieldset>
      )}
      {chosen && (
        <p className="info">
          The selected instance will be reachable at <strong className="mono">{props.ip.ip}</strong>
          {chosen.run_state === 'running' ? '.' : ' once it is running.'}
        </p>
      )}
    </FormModal>
  )
}

/** A detached floating IP moves to another project of the silo, keeping its address. */
function MoveFloatingIp(props: { ip: FloatingIp; project: string; onClose: () => void; onMoved: (to: string) => void }) {
  const projects = useQuery({ queryKey: ['projects', 'all'], queryFn: () => getAll<Project>('/v1/projects') })
  const others = (projects.data ?? []).filter((p) => p.name !== props.project)
  const [picked, setPicked] = useState('')
  const to = picked || others[0]?.name || ''
  return (
    <FormModal
      title={`Move floating IP ${props.ip.name}`}
      submitLabel="Move"
      onClose={props.onClose}
      validate={() => to !== ''}
      onSubmit={async () => {
        await post(`/v1/system/floating-ips/${seg(props.ip.id)}/transfer`, { project: to })
        props.onMoved(to)
      }}
    >
      {projects.isSuccess && others.length === 0 ? (
        <p>This silo has no other project to move it to.</p>
      ) : (
        <Field label="To project">
          {(id) => (
            <select id={id} value={to} onChange={(e) => setPicked(e.target.value)}>
              {others.map((p) => (
                <option key={p.id} value={p.name}>
                  {p.name}
                </option>
              ))}
            </select>
          )}
        </Field>
      )}
      <p className="info">
        It keeps its address <strong className="mono">{props.ip.ip}</strong>, its id and its name.
      </p>
    </FormModal>
  )
}
