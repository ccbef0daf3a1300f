import { keepPreviousData, useQuery, useQueryClient } from '@tanstack/react-query'
import { useRef, useState } from 'react'

import { get, getAll, type Query } from './api'
import { newPollMemory, nextPollInterval } from './poll'
import type { CurrentUser, Instance, IpPool, SiloIpPool } from './types'

export const PAGE_SIZE = 50

export function useMe() {
  return useQuery({ queryKey: ['me'], queryFn: () => get<CurrentUser>('/v1/me'), staleTime: 60_000 })
}

/**
 * One page of a list, 50 rows, paginated by the server (CON-6): the page tokens seen so far
 * make "Previous" possible.
 */
export function usePagedList<T>(
  key: unknown[],
  path: string,
  query: Query = {},
  refetchInterval?: number | ((items: T[] | undefined) => number | false),
) {
  // The page tokens belong to one list: another filter or project starts again from the first
  // page (the server reads a token's own filters, not the query's).
  const identity = JSON.stringify([key, query])
  const [pages, setPages] = useState<{ identity: string; tokens: (string | null)[] }>({ identity, tokens: [null] })
  const tokens = pages.identity === identity ? pages.tokens : [null]
  const setTokens = (update: (t: (string | null)[]) => (string | null)[]) =>
    setPages({ identity, tokens: update(tokens) })
  const token = tokens[tokens.length - 1]
  const result = useQuery({
    queryKey: [...key, 'page', token],
    queryFn: ({ signal }) =>
      get<{ items: T[]; next_page: string | null }>(path, { ...query, limit: PAGE_SIZE, page_token: token }, signal),
    placeholderData: keepPreviousData,
    refetchInterval:
      typeof refetchInterval === 'function' ? (q) => refetchInterval(q.state.data?.items) : refetchInterval,
  })
  return {
    ...result,
    items: result.data?.items ?? [],
    hasPrev: tokens.length > 1,
    // Not while the page asked for is still loading (the previous one is shown meanwhile).
    hasNext: !!result.data?.next_page && !result.isPlaceholderData,
    next: () => {
      if (result.data?.next_page && !result.isPlaceholderData) setTokens((t) => [...t, result.data!.next_page])
    },
    prev: () => setTokens((t) => (t.length > 1 ? t.slice(0, -1) : t)),
  }
}

/** The interval function for lists of instances (CON-19). */
export function useInstancePolling() {
  const memory = useRef(newPollMemory())
  return (items: Instance[] | undefined) => {
    const transitional = (items ?? [])
      .filter((i) => ['creating', 'starting', 'stopping', 'rebooting', 'migrating'].includes(i.run_state))
      .map((i) => `${i.id}:${i.run_state}`)
    return nextPollInterval(memory.current, transitional, Date.now())
  }
}

/** The pools the user's silo may allocate from (`GET /v1/ip-pools`), for pickers and names. */
export function useSiloPools() {
  return useQuery({ queryKey: ['ip-pools', 'silo'], queryFn: () => getAll<SiloIpPool>('/v1/ip-pools') })
}

/** Every instance of a project (up to 1000), for names and the attach picker. */
export function useProjectInstances(project: string) {
  return useQuery({
    queryKey: ['instances', project, 'all'],
    queryFn: () => getAll<Instance>('/v1/instances', { project }),
  })
}

export function useSystemPools(enabled = true) {
  return useQuery({
    queryKey: ['system-ip-pools', 'all'],
    queryFn: () => getAll<IpPool>('/v1/system/ip-pools'),
    enabled,
  })
}

export function useInvalidate() {
  const client = useQueryClient()
  return (...keys: string[]) => Promise.all(keys.map((k) => client.invalidateQueries({ queryKey: [k] })))
}
