// How often a list of things in flux is fetched again (CON-19): every 3 s for 30 s after a
// thing enters a transitional state the page had not seen it in, then every 60 s.

export const FAST_POLL_MS = 3_000
export const FAST_POLL_WINDOW_MS = 30_000
export const SLOW_POLL_MS = 60_000

export interface PollMemory {
  /** "id:state" of each thing seen in a transitional state. */
  seen: Set<string>
  /** When a new one last appeared (ms), or -Infinity. */
  lastNewAt: number
}

export function newPollMemory(): PollMemory {
  return { seen: new Set(), lastNewAt: -Infinity }
}

/**
 * The interval after a fetch at `now` that found `transitional` ("id:state" of each thing now
 * in a transitional state). Updates `memory`.
 */
export function nextPollInterval(memory: PollMemory, transitional: string[], now: number): number {
  for (const key of transitional) {
    if (!memory.seen.has(key)) {
      memory.seen.add(key)
      memory.lastNewAt = now
    }
  }
  return now - memory.lastNewAt < FAST_POLL_WINDOW_MS ? FAST_POLL_MS : SLOW_POLL_MS
}
