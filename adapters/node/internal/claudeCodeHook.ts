/**
 * The claude-code PreToolUse hook's program, which the Node host hands `ClaudeCode.compile`: claude runs it with Node
 * before each tool call. Runtimes: Node (the program it writes).
 */
import { program } from "./callbackHook.ts"

/**
 * The PreToolUse hook: posts the call to writ on loopback with the run's token and prints the blocking deny unless
 * writ answers allow. Unreachable, a timeout, a non-2xx or a malformed answer is a deny; a crash exits 2 (blocking),
 * never 1 (which claude treats as allow).
 */
export const script = (file: string) =>
  program(file, {
    deny: `const deny = (reason) => { process.stdout.write(JSON.stringify({ hookSpecificOutput: {
  hookEventName: "PreToolUse", permissionDecision: "deny", permissionDecisionReason: reason } })); process.exit(0) }`,
    allow: "process.exit(0)"
  })
