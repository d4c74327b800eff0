/**
 * The sandbox's seccomp filter, as the classic BPF program bwrap installs with `--add-seccomp-fd` (an array of
 * `struct sock_filter`, 8 bytes each, little-endian, x86_64 only). It refuses `socket(AF_UNIX)` (unless granted) and
 * `socket(AF_VSOCK)` with EAFNOSUPPORT; namespace creation (`unshare`, `setns`, `clone` with a CLONE_NEW* flag) with
 * EPERM; `clone3` with ENOSYS, so libc falls back to `clone`, whose flags a filter can read; and `io_uring_setup`,
 * `io_uring_enter` and `io_uring_register` with EPERM. Any other architecture, and the x32 syscall range, is refused.
 */

/** Syscall numbers on x86_64, and the constants the filter compares against. */
export const x86_64 = {
  auditArch: 0xc000003e,
  x32Bit: 0x40000000,
  socket: 41,
  clone: 56,
  unshare: 272,
  setns: 308,
  ioUringSetup: 425,
  ioUringEnter: 426,
  ioUringRegister: 427,
  clone3: 435
} as const

/** Socket families the filter refuses. */
export const family = { unix: 1, vsock: 40 } as const

/** Every CLONE_NEW* flag `clone` accepts (NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET). */
export const cloneNewFlags = 0x7e020000

/** errno values the filter returns. */
export const errno = { EPERM: 1, ENOSYS: 38, EAFNOSUPPORT: 97 } as const

/** seccomp return actions. */
export const ret = { killProcess: 0x80000000, errno: 0x00050000, allow: 0x7fff0000 } as const

/** Classic BPF opcodes the program uses. */
export const op = { ldAbsW: 0x20, jeqK: 0x15, jgeK: 0x35, jsetK: 0x45, retK: 0x06 } as const

/** Offsets into `struct seccomp_data`: the syscall number, the audit arch, and the low word of the first argument. */
export const offset = { nr: 0, arch: 4, arg0: 16 } as const

/** What the filter refuses beyond its fixed set. */
export interface Options {
  /** Allow `socket(AF_UNIX)` (a policy that grants unix sockets). */
  readonly unixSockets?: boolean
}

type Target = number | string

interface Line {
  readonly label?: string
  readonly code: number
  readonly k: number
  readonly jt?: Target
  readonly jf?: Target
}

const denial = (value: number) => (ret.errno | value) >>> 0

/** The program as lines with symbolic jump targets (a label, or 0 for the next line). */
const lines = (options: Options): ReadonlyArray<Line> => [
  { code: op.ldAbsW, k: offset.arch },
  { code: op.jeqK, k: x86_64.auditArch, jt: 0, jf: "kill" },
  { code: op.ldAbsW, k: offset.nr },
  { code: op.jgeK, k: x86_64.x32Bit, jt: "enosys", jf: 0 },
  { code: op.jeqK, k: x86_64.socket, jt: "socket", jf: 0 },
  { code: op.jeqK, k: x86_64.clone, jt: "clone", jf: 0 },
  { code: op.jeqK, k: x86_64.clone3, jt: "enosys", jf: 0 },
  ...[x86_64.unshare, x86_64.setns, x86_64.ioUringSetup, x86_64.ioUringEnter, x86_64.ioUringRegister].map(
    (nr): Line => ({ code: op.jeqK, k: nr, jt: "eperm", jf: 0 })
  ),
  { code: op.retK, k: ret.allow },
  { label: "socket", code: op.ldAbsW, k: offset.arg0 },
  ...(options.unixSockets ? [] : [{ code: op.jeqK, k: family.unix, jt: "eafnosupport", jf: 0 }]),
  { code: op.jeqK, k: family.vsock, jt: "eafnosupport", jf: 0 },
  { code: op.retK, k: ret.allow },
  { label: "clone", code: op.ldAbsW, k: offset.arg0 },
  { code: op.jsetK, k: cloneNewFlags, jt: "eperm", jf: 0 },
  { code: op.retK, k: ret.allow },
  { label: "eperm", code: op.retK, k: denial(errno.EPERM) },
  { label: "enosys", code: op.retK, k: denial(errno.ENOSYS) },
  { label: "eafnosupport", code: op.retK, k: denial(errno.EAFNOSUPPORT) },
  { label: "kill", code: op.retK, k: ret.killProcess }
]

/** The filter as bwrap reads it: `struct sock_filter` entries, 8 bytes each, little-endian. */
export const program = (options: Options = {}): Uint8Array => {
  const listed = lines(options)
  const at = new Map(listed.flatMap((line, index) => line.label === undefined ? [] : [[line.label, index] as const]))
  const bytes = new Uint8Array(listed.length * 8)
  const view = new DataView(bytes.buffer)
  const jump = (from: number, target: Target | undefined) => {
    if (target === undefined || target === 0) return 0
    const to = typeof target === "number" ? from + 1 + target : at.get(target)!
    return to - from - 1
  }
  listed.forEach((line, index) => {
    view.setUint16(index * 8, line.code, true)
    view.setUint8(index * 8 + 2, jump(index, line.jt))
    view.setUint8(index * 8 + 3, jump(index, line.jf))
    view.setUint32(index * 8 + 4, line.k, true)
  })
  return bytes
}
