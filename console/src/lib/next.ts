/**
 * Where to go after logging in (the login page's `?next=`): a path of this console on
 * `origin`, never another site, else the projects page.
 */
export function safeNext(next: string | null, origin: string): string {
  if (!next || !next.startsWith('/') || /[\\\s]/.test(next)) return '/projects'
  try {
    const url = new URL(next, origin)
    return url.origin === origin ? url.pathname + url.search : '/projects'
  } catch {
    return '/projects'
  }
}
