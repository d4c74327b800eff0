/**
 * What tells a process apart beyond its pid, and whether one recorded earlier is still running. On Linux: the
 * kernel's boot id, the pid namespace and the start time (from /proc), so a reused pid, a zombie or a reboot read as
 * ended, and a process in another pid namespace as unknown. Elsewhere only "no such process" reads as ended.
 */
import * as fs from "node:fs"

/** A process as recorded: its pid, and (Linux) its kernel boot, pid namespace and start time; "" where unknown. */
export interface ProcessIdentity {
  readonly pid: number
  readonly boot_id: string
  readonly pid_namespace: string
  readonly started: string
}

const readOr = (read: () => string) => {
  try {
    return read().trim()
  } catch {
    return ""
  }
}

// The state and start time (in clock ticks since boot) of a live pid, from /proc; undefined when there is no such pid.
const procStat = (pid: number) => {
  const stat = readOr(() => fs.readFileSync(`/proc/${pid}/stat`, "utf8"))
  if (stat === "") return undefined
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return { state: fields[0] ?? "", started: fields[19] ?? "" }
}

/** The identity of a running process, as it would record its own. */
export const of = (pid: number): ProcessIdentity => ({
  pid,
  boot_id: readOr(() => fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8")),
  pid_namespace: readOr(() => fs.readlinkSync(`/proc/${pid}/ns/pid`)),
  started: procStat(pid)?.started ?? ""
})

/** This process's identity. */
export const current = (): ProcessIdentity => of(process.pid)

const signalable = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as { readonly code?: unknown }).code !== "ESRCH"
  }
}

/** Whether a process recorded on this machine may still be running, as seen from `self`: only a proven end is false. */
export const mayBeRunning = (recorded: ProcessIdentity, self: ProcessIdentity): boolean => {
  if (recorded.boot_id === "" || self.boot_id === "") return signalable(recorded.pid)
  if (recorded.boot_id !== self.boot_id) return false
  if (recorded.pid_namespace !== self.pid_namespace) return true
  const stat = procStat(recorded.pid)
  return stat !== undefined && stat.state !== "Z" && stat.state !== "X" && stat.started === recorded.started
}
