import { useState } from 'react'
import { Link, useParams } from 'react-router'

import { DescriptionField, FormModal, NameField } from '../components/forms'
import { useToast } from '../components/toast'
import {
  Button,
  ConfirmModal,
  EmptyState,
  ErrorText,
  PageHeader,
  Pager,
  StateBadge,
  UpdatedAt,
  formatTime,
} from '../components/ui'
import { del, post, seg } from '../lib/api'
import { canDelete, canStart, canStop } from '../lib/instances'
import { nameError } from '../lib/names'
import { useInstancePolling, useInvalidate, usePagedList } from '../lib/queries'
import type { Instance } from '../lib/types'

const GiB = 1024 ** 3

export function InstancesPage() {
  const project = useParams().project!
  const polling = useInstancePolling()
  const list = usePagedList<Instance>(['instances', project], '/v1/instances', { project }, polling)
  const [creating, setCreating] = useState(false)
  const [stopping, setStopping] = useState<Instance | null>(null)
  const [deleting, setDeleting] = useState<Instance | null>(null)
  const [error, setError] = useState<unknown>(null)
  const invalidate = useInvalidate()
  const toast = useToast()
  const refresh = () => invalidate('instances', 'floating-ips', 'external-ips', 'utilization')
  const start = async (i: Instance) => {
    setError(null)
    try {
      await post(`/v1/instances/${seg(i.id)}/start`)
      toast(`Instance ${i.name} starting`)
    } catch (e) {
      setError(e)
    }
    await refresh()
  }

  return (
    <>
      <PageHeader
        title="Instances"
        subtitle={
          <>
            The virtual machines of project <strong>{project}</strong>. <UpdatedAt at={list.dataUpdatedAt} />
          </>
        }
        actions={
          <Button variant="primary" onClick={() => setCreating(true)}>
            New instance
          </Button>
        }
      />
      <ErrorText error={list.error ?? error} />
      {list.isSuccess && list.items.length === 0 ? (
        <EmptyState title="No instances">Create one, then give it a floating IP.</EmptyState>
      ) : (
        <table className="table" aria-label="Instances">
          <thead>
            <tr>
              <th>Name</th>
              <th>State</th>
              <th>CPUs</th>
              <th>Memory</th>
              <th>Hostname</th>
              <th>State since</th>
              <th aria-label="Actions" />
            </tr>
          </thead>
          <tbody>
            {list.items.map((i) => (
              <tr key={i.id}>
                <td>
                  <Link to={`/projects/${seg(project)}/instances/${seg(i.name)}/networking`} className="strong">
                    {i.name}
                  </Link>
                </td>
                <td>
                  <StateBadge state={i.run_state} />
                </td>
                <td>{i.ncpus}</td>
                <td>{i.memory >= GiB ? `${(i.memory / GiB).toFixed(i.memory % GiB ? 1 : 0)} GiB` : `${i.memory} B`}</td>
                <td className="mono muted">{i.hostname}</td>
                <td className="muted">{formatTime(i.time_run_state_updated)}</td>
                <td className="row-actions">
                  <Button
                    small
                    variant="ghost"
                    label={`Start ${i.name}`}
                    onClick={() => start(i)}
                    disabledReason={canStart(i.run_state) ? undefined : `Only a stopped or failed instance can be started`}
                  >
                    Start
                  </Button>
                  <Button
                    small
                    variant="ghost"
                    label={`Stop ${i.name}`}
                    onClick={() => setStopping(i)}
                    disabledReason={canStop(i.run_state) ? undefined : `A ${i.run_state} instance cannot be stopped`}
                  >
                    Stop
                  </Button>
                  <Button
                    small
                    variant="ghost"
                    label={`Delete ${i.name}`}
                    onClick={() => setDeleting(i)}
                    disabledReason={canDelete(i.run_state) ? undefined : 'Stop the instance before deleting it'}
                  >
                    Delete
                  </Button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager hasPrev={list.hasPrev} hasNext={list.hasNext} onPrev={list.prev} onNext={list.next} count={list.items.length} />
      {creating && (
        <CreateInstance
          project={project}
          onClose={() => setCreating(false)}
          onCreated={(i) => {
            toast(`Instance ${i.name} created`)
            refresh()
          }}
        />
      )}
      {stopping && (
        <ConfirmModal
          title="Stop instance"
          confirmLabel="Stop"
          onClose={() => setStopping(null)}
          onConfirm={async () => {
            await post(`/v1/instances/${seg(stopping.id)}/stop`)
            toast(`Instance ${stopping.name} stopping`)
            await refresh()
          }}
        >
          Are you sure you want to stop instance <strong>{stopping.name}</strong>? Its addresses stay attached, but
          carry no traffic until it runs again.
        </ConfirmModal>
      )}
      {deleting && (
        <ConfirmModal
          title="Delete instance"
          confirmLabel="Delete"
          onClose={() => setDeleting(null)}
          onConfirm={async () => {
            await del(`/v1/instances/${seg(deleting.id)}`)
            toast(`Instance ${deleting.name} deleted`)
            await refresh()
          }}
        >
          Are you sure you want to delete instance <strong>{deleting.name}</strong>? Its ephemeral IPs go back to
          their pools; its floating IPs are detached and stay in the project.
        </ConfirmModal>
      )}
    </>
  )
}

function CreateInstance(props: { project: string; onClose: () => void; onCreated: (i: Instance) => void }) {
  const [name, setName] = useState('')
  const [description, setDescription] = useState('')
  const [ncpus, setNcpus] = useState(1)
  const [memoryGiB, setMemoryGiB] = useState(1)
  const [start, setStart] = useState(true)
  const [snat, setSnat] = useState(true)
  const [touched, setTouched] = useState(false)
  return (
    <FormModal
      title="Create instance"
      submitLabel="Create instance"
      onClose={props.onClose}
      validate={() => {
        setTouched(true)
        return !nameError(name)
      }}
      onSubmit={async () => {
        const created = await post<Instance>(
          '/v1/instances',
          // `snat` is floatplane's additive field; left out it is true, as Oxide's behaviour.
          { name, description, hostname: name, ncpus, memory: memoryGiB * GiB, start, ...(snat ? {} : { snat: false }) },
          { project: props.project },
        )
        props.onCreated(created)
      }}
    >
      <NameField value={name} onChange={(v) => (setName(v), setTouched(true))} touched={touched} />
      <DescriptionField value={description} onChange={setDescription} />
      <div className="field-row">
        <label className="field">
          <span>CPUs</span>
          <input type="number" min={1} max={64} value={ncpus} onChange={(e) => setNcpus(Number(e.target.value))} />
        </label>
        <label className="field">
          <span>Memory (GiB)</span>
          <input type="number" min={1} max={256} value={memoryGiB} onChange={(e) => setMemoryGiB(Number(e.target.value))} />
        </label>
      </div>
      <label className="checkbox">
        <input type="checkbox" checked={start} onChange={(e) => setStart(e.target.checked)} /> Start it once created
      </label>
      <label className="checkbox">
        <input type="checkbox" checked={snat} onChange={(e) => setSnat(e.target.checked)} /> Outbound SNAT
      </label>
      <p className="muted">
        {snat
          ? 'It can reach the internet through a shared SNAT address (a quarter of an IPv4 address from the default pool; a dual-stack instance also a quarter of an IPv6 one, when the silo has a default IPv6 pool).'
          : 'No way out until an ephemeral or floating IP is attached, and no address taken.'}
      </p>
    </FormModal>
  )
}
