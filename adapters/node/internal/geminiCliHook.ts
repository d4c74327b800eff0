/**
 * The gemini-cli BeforeTool hook's program, which the Node host hands `GeminiCli.compile`: gemini runs it before each
 * tool call. Runtimes: Node (the program it writes).
 */
import { program } from "./callbackHook.ts"

/**
 * The BeforeTool hook: posts the call to writ on loopback with the run's token and prints `{"decision":"deny"}`
 * unless writ answers allow. Unreachable, a timeout, a non-2xx or a malformed answer is a deny; a crash exits 2
 * (blocking), never 1.
 */
export const script = (file: string) =>
  program(file, {
    deny:
      `const deny = (reason) => { process.stdout.write(JSON.stringify({ decision: "deny", reason })); process.exit(0) }`,
    allow: `{ process.stdout.write(JSON.stringify({ decision: "allow" })); process.exit(0) }`
  })
