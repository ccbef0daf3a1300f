import { useState } from 'react'

import { Badge, EmptyState, ErrorText, PageHeader, Pager, UpdatedAt, formatTime } from '../../components/ui'
import { usePagedList } from '../../lib/queries'
import type { AuditLogEntry } from '../../lib/types'

const WINDOWS = [
  { id: '1h', label: 'last hour', ms: 3_600_000 },
  { id: '24h', label: 'last 24 hours', ms: 86_400_000 },
  { id: '7d', label: 'last 7 days', ms: 7 * 86_400_000 },
]

function actorText(a: AuditLogEntry['actor']): string {
  switch (a.kind) {
    case 'silo_user':
      return `user ${a.silo_user_id.slice(0, 8)}`
    case 'user_builtin':
      return `built-in ${a.user_builtin_id.slice(0, 8)}`
    case 'scim':
      return 'SCIM'
    default:
      return 'unauthenticated'
  }
}

/** Who did what, newest first: every mutating request, login and logout. */
export function AuditLogPage() {
  const [window, setWindow] = useState('24h')
  // The window's start, fixed when chosen (a moving start would change every page's key).
  const [start] = useState(() => Date.now())
  const span = WINDOWS.find((w) => w.id === window)!.ms
  const startTime = new Date(start - span).toISOString()
  const list = usePagedList<AuditLogEntry>(['audit-log', window], '/v1/system/audit-log', {
    start_time: startTime,
    sort_by: 'time_and_id_descending',
  })
  return (
    <>
      <PageHeader
        title="Audit log"
        subtitle={
          <>
            Every change made through the API, every login and logout. <UpdatedAt at={list.dataUpdatedAt} />
          </>
        }
        actions={
          <label className="inline-field">
            Since{' '}
            <select value={window} onChange={(e) => setWindow(e.target.value)}>
              {WINDOWS.map((w) => (
                <option key={w.id} value={w.id}>
                  {w.label}
                </option>
              ))}
            </select>
          </label>
        }
      />
      <ErrorText error={list.error} />
      {list.isSuccess && list.items.length === 0 ? (
        <EmptyState title="Nothing in this window" />
      ) : (
        <table className="table" aria-label="Audit log">
          <thead>
            <tr>
              <th>Time</th>
              <th>Operation</th>
              <th>Actor</th>
              <th>Result</th>
              <th>Source</th>
              <th>Request id</th>
            </tr>
          </thead>
          <tbody>
            {list.items.map((e) => (
              <tr key={e.id}>
                <td className="muted small">{formatTime(e.time_completed ?? e.time_started)}</td>
                <td>
                  <div className="strong">{e.operation_id}</div>
                  <div className="mono muted small">{e.request_uri}</div>
                </td>
                <td>
                  {actorText(e.actor)}
                  {e.auth_method && <div className="muted small">{e.auth_method}</div>}
                </td>
                <td>
                  {e.result.kind === 'success' ? (
                    <Badge tone="green">{e.result.http_status_code}</Badge>
                  ) : e.result.kind === 'error' ? (
                    <span title={e.result.error_message}>
                      <Badge tone="red">{e.result.http_status_code}</Badge>{' '}
                      <span className="small">{e.result.error_message}</span>
                    </span>
                  ) : (
                    <Badge>unknown</Badge>
                  )}
                </td>
                <td className="mono small">{e.source_ip}</td>
                <td className="mono muted small">{e.request_id}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager hasPrev={list.hasPrev} hasNext={list.hasNext} onPrev={list.prev} onNext={list.next} count={list.items.length} />
    </>
  )
}
