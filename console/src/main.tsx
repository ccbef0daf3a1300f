import { MutationCache, QueryCache, QueryClient, QueryClientProvider } from '@tanstack/react-query'
import { StrictMode } from 'react'
import { createRoot } from 'react-dom/client'
import { BrowserRouter, Navigate, Route, Routes } from 'react-router'

import { Layout } from './components/Layout'
import { ToastProvider } from './components/toast'
import { ApiError } from './lib/api'
import { FloatingIpsPage } from './pages/FloatingIps'
import { InstanceNetworkingPage } from './pages/InstanceNetworking'
import { InstancesPage } from './pages/Instances'
import { LoginPage } from './pages/Login'
import { NotFoundPage } from './pages/NotFound'
import { ProjectsPage } from './pages/Projects'
import { AuditLogPage } from './pages/system/AuditLog'
import { IpPoolPage } from './pages/system/IpPool'
import { IpPoolsPage } from './pages/system/IpPools'
import { SagaPage, SagasPage } from './pages/system/Sagas'
import { SilosPage } from './pages/system/Silos'
import { UtilizationPage } from './pages/Utilization'
import './styles.css'

// A session that ended (idle, expired, logged out elsewhere) shows as a 401 on any request:
// asking /v1/me again makes the layout send the user to log in.
const sessionEnded = (error: unknown, key?: readonly unknown[]) => {
  if (error instanceof ApiError && error.status === 401 && key?.[0] !== 'me') {
    void queryClient.invalidateQueries({ queryKey: ['me'] })
  }
}
const queryClient: QueryClient = new QueryClient({
  queryCache: new QueryCache({ onError: (error, query) => sessionEnded(error, query.queryKey) }),
  mutationCache: new MutationCache({ onError: (error) => sessionEnded(error) }),
  defaultOptions: {
    queries: {
      // A 4xx will not change by asking again; a lost connection or a 503 may.
      retry: (count, error) => count < 2 && !(error instanceof ApiError && error.status >= 400 && error.status < 500),
      staleTime: 2_000,
    },
  },
})

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <QueryClientProvider client={queryClient}>
      <ToastProvider>
        <BrowserRouter>
          <Routes>
            <Route path="/login" element={<LoginPage />} />
            <Route element={<Layout />}>
              <Route index element={<Navigate to="/projects" replace />} />
              <Route path="projects" element={<ProjectsPage />} />
              <Route path="projects/:project" element={<Navigate to="instances" replace />} />
              <Route path="projects/:project/instances" element={<InstancesPage />} />
              <Route path="projects/:project/instances/:instance" element={<Navigate to="networking" replace />} />
              <Route path="projects/:project/instances/:instance/networking" element={<InstanceNetworkingPage />} />
              <Route path="projects/:project/floating-ips" element={<FloatingIpsPage />} />
              <Route path="utilization" element={<UtilizationPage />} />
              <Route path="system/ip-pools" element={<IpPoolsPage />} />
              <Route path="system/ip-pools/:pool" element={<IpPoolPage />} />
              <Route path="system/silos" element={<SilosPage />} />
              <Route path="system/sagas" element={<SagasPage />} />
              <Route path="system/sagas/:saga" element={<SagaPage />} />
              <Route path="system/audit-log" element={<AuditLogPage />} />
              <Route path="*" element={<NotFoundPage />} />
            </Route>
          </Routes>
        </BrowserRouter>
      </ToastProvider>
    </QueryClientProvider>
  </StrictMode>,
)
