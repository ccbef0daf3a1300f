import { useEffect, useId, useRef, useState, type ReactNode } from 'react'

import { ApiError } from '../lib/api'
import { displayBigNum } from '../lib/bignum'

type Variant = 'primary' | 'secondary' | 'danger' | 'ghost'

export function Button(props: {
  children: ReactNode
  onClick?: () => void
  variant?: Variant
  type?: 'button' | 'submit'
  /** Why the button cannot be used now: it is disabled and says why on hover. */
  disabledReason?: string
  disabled?: boolean
  busy?: boolean
  small?: boolean
  label?: string
}) {
  const disabled = props.disabled || props.busy || props.disabledReason !== undefined
  const button = (
    <button
      type={props.type ?? 'button'}
      className={`btn btn-${props.variant ?? 'secondary'}${props.small ? ' btn-small' : ''}`}
      onClick={props.onClick}
      disabled={disabled}
      aria-label={props.label}
      aria-busy={props.busy || undefined}
    >
      {props.children}
    </button>
  )
  if (!props.disabledReason) return button
  // A disabled button receives no pointer events: its wrapper carries the reason.
  return (
    <span className="has-tip" title={props.disabledReason}>
      {button}
    </span>
  )
}

/** The server's message, verbatim, and the request id to quote when asking for help. */
export function ErrorText({ error }: { error: unknown }) {
  if (!error) return null
  const message = error instanceof Error ? error.message : String(error)
  const requestId = error instanceof ApiError ? error.requestId : undefined
  return (
    <div className="error-text" role="alert">
      <span className="error-message">{message}</span>
      {requestId && <span className="request-id">request id {requestId}</span>}
    </div>
  )
}

export function Modal(props: {
  title: string
  onClose: () => void
  children: ReactNode
  footer?: ReactNode
  wide?: boolean
}) {
  const titleId = useId()
  const ref = useRef<HTMLDivElement>(null)
  const { onClose } = props
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') onClose()
    }
    document.addEventListener('keydown', onKey)
    const first = ref.current?.querySelector<HTMLElement>('input, select, textarea, button.btn-primary, button.btn-danger')
    first?.focus()
    return () => document.removeEventListener('keydown', onKey)
  }, [onClose])
  return (
    <div className="modal-backdrop" onMouseDown={(e) => e.target === e.currentTarget && onClose()}>
      <div
        className={`modal${props.wide ? ' modal-wide' : ''}`}
        role="dialog"
        aria-modal="true"
        aria-labelledby={titleId}
        ref={ref}
      >
        <header className="modal-header">
          <h2 id={titleId}>{props.title}</h2>
          <button type="button" className="modal-close" aria-label="Close" onClick={props.onClose}>
            ×
          </button>
        </header>
        <div className="modal-body">{props.children}</div>
        {props.footer && <footer className="modal-footer">{props.footer}</footer>}
      </div>
    </div>
  )
}

/**
 * What a modal's button runs: busy while `action` runs, closed (`onDone`) when it succeeds,
 * open with the server's error when it fails.
 */
export function useModalAction(action: () => Promise<unknown>, onDone: () => void) {
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<unknown>(null)
  const run = async () => {
    setBusy(true)
    setError(null)
    try {
      await action()
      onDone()
    } catch (e) {
      setError(e)
    } finally {
      setBusy(false)
    }
  }
  return { busy, error, run }
}

/**
 * Every destructive action asks first (CON-20). A failure keeps the modal open with the
 * server's error; success closes it.
 */
export function ConfirmModal(props: {
  title: string
  children: ReactNode
  confirmLabel: string
  onConfirm: () => Promise<unknown>
  onClose: () => void
  destructive?: boolean
}) {
  const { busy, error, run: confirm } = useModalAction(props.onConfirm, props.onClose)
  return (
    <Modal
      title={props.title}
      onClose={props.onClose}
      footer={
        <>
          <Button onClick={props.onClose}>Cancel</Button>
          <Button variant={props.destructive === false ? 'primary' : 'danger'} onClick={confirm} busy={busy}>
            {props.confirmLabel}
          </Button>
        </>
      }
    >
      <div className="confirm-text">{props.children}</div>
      <ErrorText error={error} />
    </Modal>
  )
}

export function PageHeader(props: { title: string; subtitle?: ReactNode; actions?: ReactNode; icon?: ReactNode }) {
  return (
    <div className="page-header">
      <div>
        <h1>{props.title}</h1>
        {props.subtitle && <div className="page-subtitle">{props.subtitle}</div>}
      </div>
      {props.actions && <div className="page-actions">{props.actions}</div>}
    </div>
  )
}

export function Badge({ children, tone = 'neutral', title }: { children: ReactNode; tone?: string; title?: string }) {
  return (
    <span className={`badge badge-${tone}`} title={title}>
      {children}
    </span>
  )
}

const STATE_TONES: Record<string, string> = {
  running: 'green',
  stopped: 'neutral',
  failed: 'red',
  starting: 'blue',
  stopping: 'blue',
  rebooting: 'blue',
  migrating: 'blue',
  creating: 'blue',
  repairing: 'yellow',
  destroyed: 'neutral',
  done: 'green',
  unwound: 'neutral',
  unwinding: 'yellow',
  stuck: 'red',
  abandoned: 'red',
}

export function StateBadge({ state }: { state: string }) {
  return <Badge tone={STATE_TONES[state] ?? 'neutral'}>{state}</Badge>
}

export function CopyButton({ text, label }: { text: string; label: string }) {
  const [copied, setCopied] = useState(false)
  return (
    <button
      type="button"
      className="copy"
      aria-label={label}
      title={copied ? 'Copied' : 'Copy to clipboard'}
      onClick={async () => {
        try {
          await navigator.clipboard.writeText(text)
          setCopied(true)
          setTimeout(() => setCopied(false), 1500)
        } catch {
          setCopied(false)
        }
      }}
    >
      {copied ? (
        '✓'
      ) : (
        <svg width="13" height="13" viewBox="0 0 16 16" aria-hidden="true">
          <rect x="5" y="5" width="9" height="9" rx="1.5" fill="none" stroke="currentColor" strokeWidth="1.5" />
          <path d="M3.5 11H3a1 1 0 0 1-1-1V3a1 1 0 0 1 1-1h7a1 1 0 0 1 1 1v.5" fill="none" stroke="currentColor" strokeWidth="1.5" />
        </svg>
      )}
    </button>
  )
}

export function BigNum({ n }: { n: number }) {
  const text = displayBigNum(n)
  return text.abbreviated ? <span title={text.exact}>{text.short}</span> : <span>{text.short}</span>
}

export function Field(props: {
  label: string
  error?: string
  hint?: ReactNode
  children: (id: string, describedBy: string | undefined) => ReactNode
}) {
  const id = useId()
  const hintId = useId()
  const errorId = useId()
  const describedBy = [props.error ? errorId : '', props.hint ? hintId : ''].filter(Boolean).join(' ') || undefined
  return (
    <div className={`field${props.error ? ' field-invalid' : ''}`}>
      <label htmlFor={id}>{props.label}</label>
      {props.children(id, describedBy)}
      {props.hint && (
        <div className="field-hint" id={hintId}>
          {props.hint}
        </div>
      )}
      {props.error && (
        <div className="field-error" id={errorId}>
          {props.error}
        </div>
      )}
    </div>
  )
}

export function EmptyState({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="empty">
      <div className="empty-title">{title}</div>
      {children && <div className="empty-body">{children}</div>}
    </div>
  )
}

export function Pager(props: { hasPrev: boolean; hasNext: boolean; onPrev: () => void; onNext: () => void; count: number }) {
  if (!props.hasPrev && !props.hasNext) return null
  return (
    <nav className="pager" aria-label="Pages">
      <span className="pager-count">{props.count} on this page</span>
      <Button small onClick={props.onPrev} disabled={!props.hasPrev}>
        Previous
      </Button>
      <Button small onClick={props.onNext} disabled={!props.hasNext}>
        Next
      </Button>
    </nav>
  )
}

export function UpdatedAt({ at }: { at: number }) {
  if (!at) return null
  return <span className="updated">Updated {new Date(at).toLocaleTimeString('en-GB')}</span>
}

export function formatTime(rfc3339: string | null | undefined): string {
  if (!rfc3339) return '—'
  const d = new Date(rfc3339)
  return Number.isNaN(d.getTime()) ? rfc3339 : d.toLocaleString('en-GB', { dateStyle: 'medium', timeStyle: 'medium' })
}

export function Tabs(props: { tabs: { id: string; label: string }[]; current: string; onChange: (id: string) => void }) {
  return (
    <div className="tabs" role="tablist">
      {props.tabs.map((t) => (
        <button
          key={t.id}
          role="tab"
          type="button"
          aria-selected={t.id === props.current}
          className={t.id === props.current ? 'tab tab-active' : 'tab'}
          onClick={() => props.onChange(t.id)}
        >
          {t.label}
        </button>
      ))}
    </div>
  )
}
