/** A compiled glob: `*` matches any run of characters, everything else is literal. */
export interface Glob {
  readonly source: string
  readonly wildcard: boolean
  readonly test: (value: string) => boolean
}

const escape = (text: string) => text.replace(/[.+?^${}()|[\]\\]/g, "\\$&")

/** Compile a glob pattern once. */
export const glob = (pattern: string): Glob => {
  if (!pattern.includes("*")) return { source: pattern, wildcard: false, test: (value) => value === pattern }
  if (pattern === "*") return { source: pattern, wildcard: true, test: () => true }
  const regex = new RegExp(`^${pattern.split("*").map(escape).join(".*")}$`, "s")
  return { source: pattern, wildcard: true, test: (value) => regex.test(value) }
}

/** Whether a command matches a pattern as a whole or as its leading words (`git status` matches `git status -s`). */
export const commandMatches = (pattern: Glob, command: string): boolean =>
  pattern.test(command) || (!pattern.wildcard && command.startsWith(pattern.source + " ")) ||
  (pattern.wildcard && pattern.test(command.split(/\s+/, 1)[0]!))
