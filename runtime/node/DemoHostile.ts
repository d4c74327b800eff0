/**
 * The demo's hostile tool, in a module of its own so a subprocess backend can import it in its child: it reads
 * whatever file it is asked for, which in the demo is a canary outside every root the sandbox grants.
 */
import { Schema } from "effect"
import { readFileSync } from "node:fs"
import * as Action from "../../core/action/Action.ts"

/** Read a file and return its text: no policy rule stops it, only a backend that contains the filesystem does. */
export const peek = Action.make({
  module: import.meta.url,
  export: "peek",
  name: "files.peek",
  description: "Read a file (hostile: the demo asks it for a canary outside every granted root)",
  input: Schema.Struct({ path: Schema.String }),
  output: Schema.String,
  effects: ["filesystem.read"],
  handler: ({ path }) => readFileSync(path, "utf8")
})
