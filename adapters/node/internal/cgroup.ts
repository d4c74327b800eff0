/**
 * Per-call cgroups on the v1 `memory` and `pids` controllers: a pair created for one call with its limits, the
 * launch moved into both before bwrap starts (so every process of the sandbox is charged there), whether the memory
 * limit killed something, and the pair's removal once every process in it is gone; groups left behind by a writ that
 * died mid-call are swept once they are empty and stale. A harness run's CLI gets a `pids` group of its own with no
 * limit (`track`), only so that whatever it leaves behind, in any session, is killed with it; the group is named for
 * the writ process that owns it, and a group whose owner has ended (a writ that died mid-run) is killed and removed
 * by the next run (`reclaim`).
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as ProcessIdentity from "./processIdentity.ts"

/** The limits of one call's cgroups. */
export interface Limits {
  /** memory.limit_in_bytes (and memory.memsw.limit_in_bytes, where swap accounting exists). */
  readonly memoryBytes: number
  /** pids.max: tasks (processes and their threads) alive at once in the sandbox, bwrap included. */
  readonly processes: number
}

/** One call's pair of cgroups. */
export interface Group {
  readonly memory: string
  readonly pids: string
}

const write = (dir: string, file: string, value: string) => fs.writeFileSync(path.join(dir, file), value)

// The controller's mount must exist: only writ's own directory under it, and the group, are made.
const makeUnderController = (dir: string) => {
  try {
    fs.mkdirSync(path.dirname(dir))
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
  }
  fs.mkdirSync(dir)
}

/** Create the pair `<root>/{memory,pids}/writ/<name>` with `limits`; throws when a controller refuses. */
export const create = (root: string, name: string, limits: Limits): Group => {
  const group = { memory: path.join(root, "memory", "writ", name), pids: path.join(root, "pids", "writ", name) }
  try {
    for (const dir of Object.values(group)) makeUnderController(dir)
    write(group.memory, "memory.limit_in_bytes", String(limits.memoryBytes))
    if (fs.existsSync(path.join(group.memory, "memory.memsw.limit_in_bytes"))) {
      write(group.memory, "memory.memsw.limit_in_bytes", String(limits.memoryBytes))
    }
    write(group.pids, "pids.max", String(limits.processes))
    return group
  } catch (error) {
    for (const dir of Object.values(group)) {
      try {
        fs.rmdirSync(dir)
      } catch {
        // Never made.
      }
    }
    throw error
  }
}

/** Groups a launch is moved into: a call's pair, or a harness run's one `pids` group. */
export type Groups = Group | { readonly pids: string }

// The owner's pid namespace inode ("x" where unknown), pid and start time (empty where unknown), then the run's own id.
const ownedName = /^harness-(\d+|x)-(\d+)-(\d*)-[0-9a-f-]+$/

/** The name of a run's group: `harness-<pid namespace>-<pid>-<start time>-<id>`, for the process that owns it. */
export const ownedBy = (owner: ProcessIdentity.ProcessIdentity, id: string): string =>
  `harness-${/\[(\d+)\]/.exec(owner.pid_namespace)?.[1] ?? "x"}-${owner.pid}-${owner.started}-${id}`

// Whether a group's name proves its owner has ended: an owner recorded without a start time never does.
const ownerEnded = (name: string, self: ProcessIdentity.ProcessIdentity) => {
  const owner = ownedName.exec(name)
  return owner !== null && owner[3] !== "" && !ProcessIdentity.mayBeRunning({
    pid: Number(owner[2]),
    boot_id: self.boot_id,
    pid_namespace: owner[1] === "x" ? "" : `pid:[${owner[1]}]`,
    started: owner[3]!
  }, self)
}

const pidsController = (root: string) => {
  const controller = path.join(root, "pids")
  if (!fs.existsSync(path.join(controller, "cgroup.procs"))) throw new Error(`${controller} is not a cgroup controller`)
  return controller
}

/** The group `<root>/pids/writ/<name>` with no limit, for a launch whose every process is to be killed with it. */
export const track = (root: string, name: string): { readonly pids: string } => {
  const pids = path.join(pidsController(root), "writ", name)
  makeUnderController(pids)
  return { pids }
}

/**
 * Kill and remove every run's group under `root` whose owner has ended, as seen from `self` (a writ that died while
 * its CLI ran: what the group holds would otherwise run on unsupervised); a group whose owner may be running is never
 * touched. Returns how many were reclaimed.
 */
export const reclaim = (root: string, self: ProcessIdentity.ProcessIdentity): Effect.Effect<number> =>
  Effect.suspend(() => {
    let names: ReadonlyArray<string>
    try {
      names = fs.readdirSync(path.join(pidsController(root), "writ"))
    } catch {
      return Effect.succeed(0)
    }
    const ended = names.filter((name) => ownerEnded(name, self))
    return Effect.as(
      Effect.forEach(ended, (name) => remove({ pids: path.join(root, "pids", "writ", name) }), { discard: true }),
      ended.length
    )
  })

/** The files a launch writes its own pid into, so it and all it starts are in its groups. */
export const procs = (groups: Groups): ReadonlyArray<string> =>
  Object.values(groups).map((dir: string) => path.join(dir, "cgroup.procs"))

/** A launch moved into its groups: `sh` writes its pid into each, drops the PWD it exports, and execs `command`. */
export const wrap = (groups: Groups, command: string, args: ReadonlyArray<string>) => {
  const files = procs(groups)
  const moves = files.map((_, i) => `echo $$ > "$${i + 1}"`).join(" && ")
  return {
    command: "/bin/sh",
    args: ["-c", `${moves} && shift ${files.length} && unset PWD && exec "$@"`, "sh", ...files, command, ...args]
  }
}

const read = (file: string) => {
  try {
    return fs.readFileSync(file, "utf-8")
  } catch {
    return ""
  }
}

/** How many processes the memory limit killed in the pair. */
export const oomKills = (group: Group): number =>
  Number(/^oom_kill (\d+)$/m.exec(read(path.join(group.memory, "memory.oom_control")))?.[1] ?? 0)

/** The most memory the pair was charged, in bytes. */
export const peakMemory = (group: Group): number =>
  Number(read(path.join(group.memory, "memory.max_usage_in_bytes")).trim() || 0)

const members = (groups: Groups) =>
  procs(groups).flatMap((file) => read(file).split("\n").filter((line) => line !== "").map(Number))

/** Kill whatever is left in the groups, wait (up to 5 seconds) for them to empty, and remove them. */
export const remove = (groups: Groups): Effect.Effect<void> =>
  Effect.promise(async () => {
    for (let round = 0; round < 100; round++) {
      const left = members(groups)
      if (left.length === 0) break
      for (const pid of left) {
        try {
          process.kill(pid, "SIGKILL")
        } catch {
          // Gone already.
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    for (const dir of Object.values(groups)) {
      try {
        fs.rmdirSync(dir)
      } catch {
        // Still busy or gone: a leftover empty group holds nothing.
      }
    }
  })

/** How long an empty group must have stood unchanged before a sweep takes it: a fresh one may not have its launch yet. */
export const staleAfterMs = 60_000

/**
 * Remove writ's empty groups under `root` that have not changed for `staleAfterMs`: those of calls whose writ died
 * before removing them. A group with a process in it is never taken (the kernel refuses), nor one just made. Returns
 * how many were removed.
 */
export const sweep = (root: string, now: number = Date.now()): number => {
  let removed = 0
  for (const controller of ["memory", "pids"]) {
    const parent = path.join(root, controller, "writ")
    let names: ReadonlyArray<string>
    try {
      names = fs.readdirSync(parent)
    } catch {
      continue
    }
    for (const name of names) {
      const dir = path.join(parent, name)
      try {
        const stat = fs.statSync(dir)
        if (!stat.isDirectory() || now - stat.mtimeMs < staleAfterMs) continue
        if (read(path.join(dir, "cgroup.procs")) !== "") continue
        fs.rmdirSync(dir)
        removed++
      } catch {
        // Gone already, busy, or not a group.
      }
    }
  }
  return removed
}
