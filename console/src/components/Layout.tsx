import { useQuery, useQueryClient } from '@tanstack/react-query'
import { useEffect } from 'react'
import { Link, NavLink, Outlet, useLocation, useNavigate, useParams } from 'react-router'

import { ApiError, getAll, post } from '../lib/api'
import { useMe } from '../lib/queries'
import type { Project } from '../lib/types'
import { ErrorText } from './ui'

/** Every page but the login one: the user's session decides what the sidebar offers (CON-4). */
export function Layout() {
  const me = useMe()
  const navigate = useNavigate()
  const location = useLocation()
  const client = useQueryClient()
  const { project } = useParams()
  const projects = useQuery({
    queryKey: ['projects', 'all'],
    queryFn: () => getAll<Project>('/v1/projects'),
    enabled: me.isSuccess,
  })
  const unauthenticated = me.error instanceof ApiError && me.error.status === 401
  useEffect(() => {
    if (unauthenticated) {
      navigate(`/login?next=${encodeURIComponent(location.pathname + location.search)}`, { replace: true })
    }
  }, [unauthenticated, navigate, location])

  if (me.isPending || unauthenticated) return <div className="loading-page">Loading…</div>
  if (me.isError) {
    return (
      <div className="loading-page">
        <ErrorText error={me.error} />
      </div>
    )
  }
  const user = me.data
  const logout = async () => {
    await post('/v1/logout').catch(() => undefined)
    client.clear()
    navigate('/login', { replace: true })
  }
  return (
    <div className="shell">
      <aside className="sidebar" aria-label="Navigation">
        <Link to="/projects" className="brand">
          <img src="/favicon.svg" alt="" width={26} height={26} />
          <span>floatplane</span>
        </Link>
        <nav>
          <div className="nav-section">Silo {user.silo_name}</div>
          <NavLink to="/projects" end className="nav-link">
            Projects
          </NavLink>
          <NavLink to="/utilization" className="nav-link">
            Utilization
          </NavLink>
          {project && (
            <>
              <label className="nav-section" htmlFor="project-picker">
                Project
              </label>
              <select
                id="project-picker"
                className="project-picker"
                value={project}
                onChange={(e) => navigate(`/projects/${encodeURIComponent(e.target.value)}/instances`)}
              >
                {!projects.data?.some((p) => p.name === project) && <option value={project}>{project}</option>}
                {projects.data?.map((p) => (
                  <option key={p.id} value={p.name}>
                    {p.name}
                  </option>
                ))}
              </select>
              <NavLink to={`/projects/${encodeURIComponent(project)}/instances`} className="nav-link">
                Instances
              </NavLink>
              <NavLink to={`/projects/${encodeURIComponent(project)}/floating-ips`} className="nav-link">
                Floating IPs
              </NavLink>
            </>
          )}
          {user.fleet_viewer && (
            <>
              <div className="nav-section">System</div>
              <NavLink to="/system/ip-pools" className="nav-link">
                IP pools
              </NavLink>
              <NavLink to="/system/silos" className="nav-link">
                Silos
              </NavLink>
              <NavLink to="/system/sagas" className="nav-link">
                Sagas
              </NavLink>
              <NavLink to="/system/audit-log" className="nav-link">
                Audit log
              </NavLink>
            </>
          )}
        </nav>
      </aside>
      <div className="main">
        <header className="topbar">
          <div className="topbar-where">{location.pathname.startsWith('/system') ? 'System' : `Silo ${user.silo_name}`}</div>
          <div className="topbar-user">
            <span className="user-name" title={user.id}>
              {user.display_name}
            </span>
            {user.fleet_viewer ? (
              <span className="role">fleet admin</span>
            ) : user.silo_admin ? (
              <span className="role">silo admin</span>
            ) : null}
            <button type="button" className="btn btn-ghost btn-small" onClick={logout}>
              Log out
            </button>
          </div>
        </header>
        <main className="content">
          <Outlet />
        </main>
      </div>
    </div>
  )
}
