/**
 * An exclusive lock between processes over one file's read-modify-write: `FILE.lock`, created with O_EXCL and holding
 * its holder's pid, taken over when that process is gone, removed on release.
 */
import { Effect } from "effect"
import * as fs from "node:fs"

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

// Take the lock, or leave it to its live holder; a lock whose holder is gone is removed for the next try.
const take = (lock: string): boolean => {
  try {
    const fd = fs.openSync(lock, "wx", 0o600)
    fs.writeSync(fd, String(process.pid))
    fs.closeSync(fd)
    return true
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
    let holder = 0
    try {
      holder = Number(fs.readFileSync(lock, "utf-8"))
    } catch {
      return false
    }
    // An empty file is a holder still writing its pid.
    if (Number.isSafeInteger(holder) && holder > 0 && !alive(holder)) fs.rmSync(lock, { force: true })
    return false
  }
}

/** Run `self` holding `file`'s lock, waiting for it up to `waitMillis`; `refused` names a failure to take it. */
export const withLock = <A, E, R, E2>(
  file: string,
  self: Effect.Effect<A, E, R>,
  refused: (cause: unknown) => E2,
  waitMillis = 30_000
): Effect.Effect<A, E | E2, R> => {
  const lock = `${file}.lock`
  const acquire = Effect.gen(function*() {
    const until = Date.now() + waitMillis
    for (;;) {
      const taken = yield* Effect.try({ try: () => take(lock), catch: refused })
      if (taken) return
      if (Date.now() > until) return yield* Effect.fail(refused(new Error(`${lock} is held by another process`)))
      yield* Effect.sleep(5 + Math.floor(Math.random() * 10))
    }
  })
  return Effect.acquireUseRelease(acquire, () => self, () => Effect.sync(() => fs.rmSync(lock, { force: true })))
}
