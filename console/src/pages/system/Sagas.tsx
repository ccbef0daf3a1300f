import { useQuery } from '@tanstack/react-query'
import { Link, useParams, useSearchParams } from 'react-router'

import { Badge, EmptyState, ErrorText, PageHeader, Pager, StateBadge, UpdatedAt, formatTime } from '../../components/ui'
import { get, seg } from '../../lib/api'
import { usePagedList } from '../../lib/queries'
import type { SagaStory, SagaSummary } from '../../lib/types'

const STATES = ['running', 'unwinding', 'done', 'unwound', 'stuck'] as const

/** Sagas by state, newest first (CON-18): `stuck` ones are what an operator must act on. */
export function SagasPage() {
  const [params, setParams] = useSearchParams()
  const state = params.get('state') ?? ''
  const list = usePagedList<SagaSummary>(['sagas', state], '/v1/system/sagas', { state }, 10_000)
  return (
    <>
      <PageHeader
        title="Sagas"
        subtitle={
          <>
            Every attach, detach and instance change runs as a saga that survives a crash.{' '}
            <UpdatedAt at={list.dataUpdatedAt} />
          </>
        }
        actions={
          <label className="inline-field">
            State{' '}
            <select value={state} onChange={(e) => setParams(e.target.value ? { state: e.target.value } : {})}>
              <option value="">any</option>
              {STATES.map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </select>
          </label>
        }
      />
      <ErrorText error={list.error} />
      {list.isSuccess && list.items.length === 0 ? (
        <EmptyState title={state ? `No ${state} sagas` : 'No sagas yet'}>
          {state === 'stuck' ? 'Nothing needs an operator.' : null}
        </EmptyState>
      ) : (
        <table className="table" aria-label="Sagas">
          <thead>
            <tr>
              <th>Saga</th>
              <th>State</th>
              <th>Started</th>
              <th>Ended</th>
              <th>Request</th>
            </tr>
          </thead>
          <tbody>
            {list.items.map((s) => (
              <tr key={s.id} className={s.state === 'stuck' ? 'row-alert' : undefined}>
                <td>
                  <Link to={`/system/sagas/${seg(s.id)}`} className="strong">
                    {s.name}
                  </Link>
                  <div className="mono muted small">{s.id}</div>
                </td>
                <td>
                  <StateBadge state={s.state} />
                </td>
                <td className="muted">{formatTime(s.time_created)}</td>
                <td className="muted">{formatTime(s.time_ended)}</td>
                <td className="mono muted small">{s.request_id ?? '—'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager hasPrev={list.hasPrev} hasNext={list.hasNext} onPrev={list.prev} onNext={list.next} count={list.items.length} />
    </>
  )
}

export function SagaPage() {
  const id = useParams().saga!
  const saga = useQuery({
    queryKey: ['sagas', 'one', id],
    queryFn: () => get<SagaStory>(`/v1/system/sagas/${seg(id)}`),
    refetchInterval: (q) => (q.state.data && ['running', 'unwinding'].includes(q.state.data.state) ? 3_000 : false),
  })
  const s = saga.data
  return (
    <>
      <div className="breadcrumbs">
        <Link to="/system/sagas">Sagas</Link> / {id}
      </div>
      <PageHeader title={s ? s.name : 'Saga'} subtitle={s && <StateBadge state={s.state} />} />
      <ErrorText error={saga.error} />
      {s && (
        <>
          <p className={`explanation${s.state === 'stuck' ? ' explanation-alert' : ''}`}>{s.explanation}</p>
          {s.error && (
            <div className="error-text" role="note">
              <span className="error-message">{s.error.message}</span>
              <span className="request-id">
                {s.error.http_status_code} {s.error.error_code}
              </span>
            </div>
          )}
          <dl className="properties">
            <dt>ID</dt>
            <dd className="mono">{s.id}</dd>
            <dt>Started</dt>
            <dd>{formatTime(s.time_created)}</dd>
            <dt>Ended</dt>
            <dd>{formatTime(s.time_ended)}</dd>
            <dt>Request</dt>
            <dd className="mono">{s.request_id ?? '—'}</dd>
            <dt>Targets</dt>
            <dd className="mono small">{JSON.stringify(s.targets)}</dd>
          </dl>
          <h2 className="section-title">Nodes</h2>
          <table className="table" aria-label="Nodes">
            <thead>
              <tr>
                <th>#</th>
                <th>Node</th>
                <th>Action</th>
                <th>Outcome</th>
                <th>Started</th>
                <th>Ended</th>
                <th>Error</th>
              </tr>
            </thead>
            <tbody>
              {s.nodes.map((n) => (
                <tr key={n.index} className={n.error ? 'row-alert' : undefined}>
                  <td>{n.index}</td>
                  <td className="strong">{n.name}</td>
                  <td>{n.action}</td>
                  <td>
                    <Badge tone={n.outcome === 'failed' ? 'red' : n.outcome === 'succeeded' ? 'green' : 'neutral'}>
                      {n.outcome}
                    </Badge>
                  </td>
                  <td className="muted small">{formatTime(n.time_started)}</td>
                  <td className="muted small">{formatTime(n.time_ended)}</td>
                  <td>{n.error ? n.error.message : ''}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </>
  )
}
