// The console's only way to the server: same-origin requests carrying the session cookie
// (HttpOnly: script never sees it). An error keeps the server's message and request id, which
// the page shows verbatim.

export class ApiError extends Error {
  readonly status: number
  readonly errorCode: string | undefined
  readonly requestId: string | undefined

  constructor(status: number, message: string, errorCode?: string, requestId?: string) {
    super(message)
    this.name = 'ApiError'
    this.status = status
    this.errorCode = errorCode
    this.requestId = requestId
  }
}

export type Query = Record<string, string | number | boolean | undefined | null>

export function withQuery(path: string, query?: Query): string {
  if (!query) return path
  const params = new URLSearchParams()
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== '') params.set(k, String(v))
  }
  const text = params.toString()
  return text ? `${path}?${text}` : path
}

/** A path segment: a name or an id, encoded. */
export const seg = (s: string) => encodeURIComponent(s)

export async function request<T>(
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  path: string,
  options: { query?: Query; body?: unknown; signal?: AbortSignal } = {},
): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' }
  if (options.body !== undefined) headers['content-type'] = 'application/json'
  let response: Response
  try {
    response = await fetch(withQuery(path, options.query), {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      credentials: 'same-origin',
      signal: options.signal,
    })
  } catch (e) {
    if (e instanceof DOMException && e.name === 'AbortError') throw e
    throw new ApiError(0, 'The server cannot be reached: check that floatplane is running')
  }
  const requestId = response.headers.get('x-request-id') ?? undefined
  if (response.status === 204) return undefined as T
  const text = await response.text()
  let body: unknown = undefined
  try {
    body = text ? JSON.parse(text) : undefined
  } catch {
    body = undefined
  }
  if (!response.ok) {
    const error = (body ?? {}) as { message?: string; error_code?: string; request_id?: string }
    let message = error.message ?? (text.trim() || response.statusText)
    const retry = response.headers.get('retry-after')
    if (response.status === 503 && retry) message += ` (try again in ${retry} s)`
    throw new ApiError(response.status, message, error.error_code, error.request_id ?? requestId)
  }
  return body as T
}

export const get = <T>(path: string, query?: Query, signal?: AbortSignal) =>
  request<T>('GET', path, { query, signal })
export const post = <T>(path: string, body?: unknown, query?: Query) =>
  request<T>('POST', path, { body, query })
export const put = <T>(path: string, body: unknown, query?: Query) =>
  request<T>('PUT', path, { body, query })
export const del = (path: string, query?: Query) => request<void>('DELETE', path, { query })

/** Every item of a paginated list, up to `max`. */
export async function getAll<T>(path: string, query: Query = {}, max = 1000): Promise<T[]> {
  const items: T[] = []
  let token: string | null = null
  do {
    const page: { items: T[]; next_page: string | null } = await get(path, {
      ...query,
      limit: Math.min(1000, max - items.length),
      page_token: token,
    })
    items.push(...page.items)
    token = page.next_page
  } while (token && items.length < max)
  return items
}
