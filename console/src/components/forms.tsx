import { type FormEvent, type ReactNode } from 'react'

import { nameError } from '../lib/names'
import { Button, ErrorText, Field, Modal, useModalAction } from './ui'

/** A name field checked as the user types (CON-10), once touched. */
export function NameField(props: { value: string; onChange: (v: string) => void; touched: boolean }) {
  const error = props.touched ? nameError(props.value) : undefined
  return (
    <Field label="Name" error={error}>
      {(id, describedBy) => (
        <input
          id={id}
          aria-describedby={describedBy}
          aria-invalid={error ? true : undefined}
          value={props.value}
          autoComplete="off"
          onChange={(e) => props.onChange(e.target.value)}
        />
      )}
    </Field>
  )
}

export function DescriptionField(props: { value: string; onChange: (v: string) => void }) {
  return (
    <Field label="Description">
      {(id) => <input id={id} value={props.value} autoComplete="off" onChange={(e) => props.onChange(e.target.value)} />}
    </Field>
  )
}

/**
 * A modal form: the submit runs `onSubmit`, whose error (the server's) is shown in the form,
 * which stays open; success closes it.
 */
export function FormModal(props: {
  title: string
  submitLabel: string
  onSubmit: () => Promise<unknown>
  onClose: () => void
  /** Checked before any request; a message keeps the form open. */
  validate?: () => boolean
  children: ReactNode
}) {
  const { busy, error, run } = useModalAction(props.onSubmit, props.onClose)
  const submit = async (e?: FormEvent) => {
    e?.preventDefault()
    if (props.validate && !props.validate()) return
    await run()
  }
  return (
    <Modal
      title={props.title}
      onClose={props.onClose}
      footer={
        <>
          <Button onClick={props.onClose}>Cancel</Button>
          <Button variant="primary" onClick={() => submit()} busy={busy}>
            {props.submitLabel}
          </Button>
        </>
      }
    >
      <form onSubmit={submit} className="form">
        {props.children}
        <ErrorText error={error} />
        <button type="submit" hidden />
      </form>
    </Modal>
  )
}
