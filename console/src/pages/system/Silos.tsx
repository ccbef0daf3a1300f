import { EmptyState, ErrorText, PageHeader, Pager, formatTime } from '../../components/ui'
import { usePagedList } from '../../lib/queries'
import type { Silo } from '../../lib/types'

export function SilosPage() {
  const list = usePagedList<Silo>(['silos'], '/v1/system/silos')
  return (
    <>
      <PageHeader title="Silos" subtitle="Tenants of the rack: each holds its users, projects and links to IP pools." />
      <ErrorText error={list.error} />
      {list.isSuccess && list.items.length === 0 ? (
        <EmptyState title="No silos" />
      ) : (
        <table className="table" aria-label="Silos">
          <thead>
            <tr>
              <th>Name</th>
              <th>Description</th>
              <th>Discoverable</th>
              <th>Identity mode</th>
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {list.items.map((s) => (
              <tr key={s.id}>
                <td className="strong">{s.name}</td>
                <td className="muted">{s.description}</td>
                <td>{s.discoverable ? 'yes' : 'no'}</td>
                <td>{s.identity_mode}</td>
                <td className="muted">{formatTime(s.time_created)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager hasPrev={list.hasPrev} hasNext={list.hasNext} onPrev={list.prev} onNext={list.next} count={list.items.length} />
    </>
  )
}
