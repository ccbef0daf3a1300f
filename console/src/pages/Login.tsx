import { useQueryClient } from '@tanstack/react-query'
import { useState, type FormEvent } from 'react'
import { useNavigate, useSearchParams } from 'react-router'

import { ErrorText, Field, Tabs } from '../components/ui'
import { ApiError, request } from '../lib/api'
import { safeNext } from '../lib/next'

/**
 * Log in with a name and password (`POST /v1/login/{silo}/local`) or with an API token, which
 * the server trades for the same session cookie (`POST /v1/login/token`, CON-3). The token is
 * sent once and kept nowhere: the cookie, which script cannot read, is the session.
 */
export function LoginPage() {
  const [params] = useSearchParams()
  const [mode, setMode] = useState(params.get('mode') === 'password' ? 'password' : 'token')
  const [silo, setSilo] = useState(params.get('silo') ?? 'default')
  const [username, setUsername] = useState('')
  const [password, setPassword] = useState('')
  const [token, setToken] = useState('')
  const [error, setError] = useState<unknown>(null)
  const [busy, setBusy] = useState(false)
  const navigate = useNavigate()
  const client = useQueryClient()
  const target = safeNext(params.get('next'), window.location.origin)

  const submit = async (e: FormEvent) => {
    e.preventDefault()
    setBusy(true)
    setError(null)
    try {
      if (mode === 'token') {
        const response = await fetch('/v1/login/token', {
          method: 'POST',
          headers: { authorization: `Bearer ${token.trim()}` },
          credentials: 'same-origin',
        })
        if (!response.ok) {
          const body = await response.json().catch(() => ({}))
          throw new ApiError(response.status, body.message ?? response.statusText, body.error_code, body.request_id)
        }
      } else {
        await request('POST', `/v1/login/${encodeURIComponent(silo.trim())}/local`, {
          body: { username: username.trim(), password },
        })
      }
      setToken('')
      setPassword('')
      client.clear()
      navigate(target, { replace: true })
    } catch (e) {
      setError(e)
    } finally {
      setBusy(false)
    }
  }

  return (
    <div className="login-page">
      <form className="login-card" onSubmit={submit} aria-label="Log in">
        <div className="login-brand">
          <img src="/favicon.svg" alt="" width={36} height={36} />
          <div>
            <div className="login-title">floatplane</div>
            <div className="login-subtitle">Public IP addresses for your instances</div>
          </div>
        </div>
        <Tabs
          tabs={[
            { id: 'token', label: 'API token' },
            { id: 'password', label: 'Username and password' },
          ]}
          current={mode}
          onChange={(m) => {
            setMode(m)
            setError(null)
          }}
        />
        {mode === 'token' ? (
          <Field
            label="Token"
            hint={
              <>
                An API token, such as the dev server’s <code>admin-token</code> file. It is traded for a
                session and not kept.
              </>
            }
          >
            {(id, describedBy) => (
              <input
                id={id}
                aria-describedby={describedBy}
                type="password"
                autoComplete="off"
                value={token}
                onChange={(e) => setToken(e.target.value)}
                required
              />
            )}
          </Field>
        ) : (
          <>
            <Field label="Silo">
              {(id) => <input id={id} value={silo} onChange={(e) => setSilo(e.target.value)} required />}
            </Field>
            <Field label="Username">
              {(id) => (
                <input
                  id={id}
                  autoComplete="username"
                  value={username}
                  onChange={(e) => setUsername(e.target.value)}
                  required
                />
              )}
            </Field>
            <Field label="Password">
              {(id) => (
                <input
                  id={id}
                  type="password"
                  autoComplete="current-password"
                  value={password}
                  onChange={(e) => setPassword(e.target.value)}
                  required
                />
              )}
            </Field>
          </>
        )}
        <ErrorText error={error} />
        <button type="submit" className="btn btn-primary btn-block" disabled={busy}>
          {busy ? 'Logging in…' : 'Log in'}
        </button>
      </form>
    </div>
  )
}

