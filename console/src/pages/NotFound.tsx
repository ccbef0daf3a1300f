import { Link } from 'react-router'

import { EmptyState } from '../components/ui'

export function NotFoundPage() {
  return (
    <EmptyState title="Page not found">
      <Link to="/projects">Back to projects</Link>
    </EmptyState>
  )
}
