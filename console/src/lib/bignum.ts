// Counts of addresses, which for IPv6 pools run past 2^53: short on the page, exact in a
// tooltip.

export interface BigNumText {
  /** What the page shows. */
  short: string
  /** The whole number, digit-grouped; the same as `short` when nothing was abbreviated. */
  exact: string
  abbreviated: boolean
}

const grouped = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 })
const compact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 })

/**
 * `n` for a page: exact below 10,000; then compact ("12.3K", "4.5M", "1.2T") below 10^15;
 * beyond that, a mantissa and a power of ten ("18.4e18").
 */
export function displayBigNum(n: number): BigNumText {
  const exact = grouped.format(n)
  const magnitude = Math.abs(n)
  if (magnitude < 10_000) return { short: exact, exact, abbreviated: false }
  if (magnitude < 1e15) return { short: compact.format(n), exact, abbreviated: true }
  const exponent = Math.floor(Math.log10(magnitude))
  // Three significant digits, as the mantissa of the largest power of ten that is a multiple
  // of 3 not above n ("18.4e18", "340.3e36").
  const engineering = exponent - (exponent % 3)
  const mantissa = n / 10 ** engineering
  return { short: `${mantissa.toFixed(1)}e${engineering}`, exact, abbreviated: true }
}
