import { useQuery } from '@tanstack/react-query'
import { useState } from 'react'
import { Link } from 'react-router'

import { DescriptionField, FormModal, NameField } from '../../components/forms'
import { useToast } from '../../components/toast'
import { BigNum, Button, EmptyState, ErrorText, Field, PageHeader, Pager, formatTime } from '../../components/ui'
import { get, post, seg } from '../../lib/api'
import { nameError } from '../../lib/names'
import { useInvalidate, usePagedList } from '../../lib/queries'
import type { IpPool, IpPoolUtilization, IpVersion } from '../../lib/types'

export function IpPoolsPage() {
  const list = usePagedList<IpPool>(['system-ip-pools'], '/v1/system/ip-pools')
  const [creating, setCreating] = useState(false)
  const invalidate = useInvalidate()
  const toast = useToast()
  return (
    <>
      <PageHeader
        title="IP pools"
        subtitle="Ranges of public addresses, linked to the silos that may allocate from them."
        actions={
          <Button variant="primary" onClick={() => setCreating(true)}>
            New IP pool
          </Button>
        }
      />
      <ErrorText error={list.error} />
      {list.isSuccess && list.items.length === 0 ? (
        <EmptyState title="No IP pools">Create a pool, add a range of addresses, and link it to a silo.</EmptyState>
      ) : (
        <table className="table" aria-label="IP pools">
          <thead>
            <tr>
              <th>Name</th>
              <th>Description</th>
              <th>Version</th>
              <th>Type</th>
              <th>IPs remaining</th>
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {list.items.map((p) => (
              <tr key={p.id}>
                <td>
                  <Link to={`/system/ip-pools/${seg(p.name)}`} className="strong">
                    {p.name}
                  </Link>
                </td>
                <td className="muted">{p.description}</td>
                <td>{p.ip_version}</td>
                <td>{p.pool_type ?? 'unicast'}</td>
                <td>
                  <Remaining pool={p.id} />
                </td>
                <td className="muted">{formatTime(p.time_created)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager hasPrev={list.hasPrev} hasNext={list.hasNext} onPrev={list.prev} onNext={list.next} count={list.items.length} />
      {creating && (
        <CreatePool
          onClose={() => setCreating(false)}
          onCreated={(p) => {
            toast(`IP pool ${p.name} created`)
            invalidate('system-ip-pools', 'ip-pools')
          }}
        />
      )}
    </>
  )
}

/** `remaining / capacity`, abbreviated when large, exact in a tooltip (CON-15). */
export function Remaining({ pool }: { pool: string }) {
  const u = useQuery({
    queryKey: ['utilization', pool],
    queryFn: () => get<IpPoolUtilization>(`/v1/system/ip-pools/${seg(pool)}/utilization`),
  })
  if (!u.data) return <span className="muted">…</span>
  return (
    <span className="mono">
      <BigNum n={u.data.remaining} /> / <BigNum n={u.data.capacity} />
    </span>
  )
}

function CreatePool({ onClose, onCreated }: { onClose: () => void; onCreated: (p: IpPool) => void }) {
  const [name, setName] = useState('')
  const [description, setDescription] = useState('')
  const [version, setVersion] = useState<IpVersion>('v4')
  const [touched, setTouched] = useState(false)
  return (
    <FormModal
      title="Create IP pool"
      submitLabel="Create IP pool"
      onClose={onClose}
      validate={() => {
        setTouched(true)
        return !nameError(name)
      }}
      onSubmit={async () => {
        onCreated(await post<IpPool>('/v1/system/ip-pools', { name, description, ip_version: version }))
      }}
    >
      <NameField value={name} onChange={(v) => (setName(v), setTouched(true))} touched={touched} />
      <DescriptionField value={description} onChange={setDescription} />
      <Field label="IP version">
        {(id) => (
          <select id={id} value={version} onChange={(e) => setVersion(e.target.value as IpVersion)}>
            <option value="v4">IPv4</option>
            <option value="v6">IPv6</option>
          </select>
        )}
      </Field>
    </FormModal>
  )
}
