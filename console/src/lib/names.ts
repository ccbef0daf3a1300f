// Names of resources, checked as the user types, in the Oxide console's words: what the API
// would refuse, said before the request.

export const NAME_MAX_LENGTH = 63

/** Why `name` is not a valid resource name, or undefined if it is one. */
export function nameError(name: string): string | undefined {
  if (name.length === 0) return 'Name is required'
  if (name.length > NAME_MAX_LENGTH) return `Must be ${NAME_MAX_LENGTH} characters or fewer`
  if (!/^[a-z0-9-]*$/.test(name)) return 'Can only contain lower-case letters, numbers, and dashes'
  if (!/^[a-z]/.test(name)) return 'Must start with a lower-case letter'
  if (!/[a-z0-9]$/.test(name)) return 'Must end with a letter or number'
  return undefined
}
