import { useState } from 'react'
import { Link } from 'react-router'

import { DescriptionField, FormModal, NameField } from '../components/forms'
import { useToast } from '../components/toast'
import { Button, ConfirmModal, EmptyState, ErrorText, PageHeader, Pager, formatTime } from '../components/ui'
import { del, post, seg } from '../lib/api'
import { nameError } from '../lib/names'
import { useInvalidate, usePagedList } from '../lib/queries'
import type { Project } from '../lib/types'

export function ProjectsPage() {
  const list = usePagedList<Project>(['projects'], '/v1/projects')
  const [creating, setCreating] = useState(false)
  const [deleting, setDeleting] = useState<Project | null>(null)
  const invalidate = useInvalidate()
  const toast = useToast()
  return (
    <>
      <PageHeader
        title="Projects"
        subtitle="Each project holds instances and the floating IPs they use."
        actions={
          <Button variant="primary" onClick={() => setCreating(true)}>
            New project
          </Button>
        }
      />
      <ErrorText error={list.error} />
      {list.isSuccess && list.items.length === 0 ? (
        <EmptyState title="No projects yet">Create one to hold your instances and floating IPs.</EmptyState>
      ) : (
        <table className="table" aria-label="Projects">
          <thead>
            <tr>
              <th>Name</th>
              <th>Description</th>
              <th>Created</th>
              <th aria-label="Actions" />
            </tr>
          </thead>
          <tbody>
            {list.items.map((p) => (
              <tr key={p.id}>
                <td>
                  <Link to={`/projects/${seg(p.name)}/instances`} className="strong">
                    {p.name}
                  </Link>
                </td>
                <td className="muted">{p.description}</td>
                <td className="muted">{formatTime(p.time_created)}</td>
                <td className="row-actions">
                  <Link to={`/projects/${seg(p.name)}/floating-ips`} className="btn btn-ghost btn-small">
                    Floating IPs
                  </Link>
                  <Button small variant="ghost" onClick={() => setDeleting(p)}>
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
        <CreateProject
          onClose={() => setCreating(false)}
          onCreated={(name) => {
            toast(`Project ${name} created`)
            invalidate('projects')
          }}
        />
      )}
      {deleting && (
        <ConfirmModal
          title="Delete project"
          confirmLabel="Delete"
          onClose={() => setDeleting(null)}
          onConfirm={async () => {
            await del(`/v1/projects/${seg(deleting.name)}`)
            toast(`Project ${deleting.name} deleted`)
            await invalidate('projects')
          }}
        >
          Are you sure you want to delete project <strong>{deleting.name}</strong>?
        </ConfirmModal>
      )}
    </>
  )
}

function CreateProject({ onClose, onCreated }: { onClose: () => void; onCreated: (name: string) => void }) {
  const [name, setName] = useState('')
  const [description, setDescription] = useState('')
  const [touched, setTouched] = useState(false)
  return (
    <FormModal
      title="Create project"
      submitLabel="Create project"
      onClose={onClose}
      validate={() => {
        setTouched(true)
        return !nameError(name)
      }}
      onSubmit={async () => {
        await post('/v1/projects', { name, description })
        onCreated(name)
      }}
    >
      <NameField value={name} onChange={(v) => (setName(v), setTouched(true))} touched={touched} />
      <DescriptionField value={description} onChange={setDescription} />
    </FormModal>
  )
}
