/**
 * What the harness keeps between runs without a database, as JSON files in writ's data directory: the identity digest
 * of each resolved executable and the version its `--version` answered, each found once per (path, inode, size, mtime)
 * and cached by that, and every verify run's result, which is what lets a report say `enforced`. Writes are atomic (a
 * temporary file renamed over), and each read-modify-write holds the file's lock, so processes writing at once lose
 * nothing.
 * Runtimes: Node.
 */
import { Effect, Schema } from "effect"
import { createHash } from "node:crypto"
import { createReadStream } from "node:fs"
import { lstat, mkdir, readdir, readFile, readlink, rename, stat, writeFile } from "node:fs/promises"
import { homedir } from "node:os"
import { dirname, join, relative } from "node:path"
import { Sha256Hex } from "../../core/base/Digest.ts"
import { VerifyRun } from "../../core/harness/CapabilityReport.ts"
import { HarnessError } from "../../core/harness/HarnessAdapter.ts"
import { withLock } from "./internal/fileLock.ts"

/** writ's data directory: `WRIT_DATA_DIR`, else `$XDG_DATA_HOME/writ`, else `~/.local/share/writ`. */
export const dataDir = (env: Readonly<Record<string, string | undefined>> = process.env): string =>
  env.WRIT_DATA_DIR ?? join(env.XDG_DATA_HOME ?? join(homedir(), ".local", "share"), "writ")

const IdentityEntry = Schema.Struct({
  path: Schema.String,
  ino: Schema.Number,
  size: Schema.Number,
  mtime_ms: Schema.Number,
  digest: Sha256Hex,
  version: Schema.optional(Schema.String)
})

const IdentityFile = Schema.parseJson(Schema.Array(IdentityEntry))
const VerifyFile = Schema.parseJson(Schema.Array(VerifyRun))

/** The harness's files in one data directory. */
export interface HarnessStore {
  readonly dir: string
  /** The sha256 of a file's bytes, cached by (path, inode, size, mtime): recomputed only when one changes. */
  readonly identity: (path: string) => Effect.Effect<Sha256Hex, HarnessError>
  /**
   * The sha256 over a package tree (each file's relative path and sha256, a symlink's target, in path order), cached
   * by (path, inode, total size, newest mtime) over the tree: recomputed only when one changes.
   */
  readonly treeIdentity: (dir: string) => Effect.Effect<Sha256Hex, HarnessError>
  /**
   * The identity of the executable at `path` (a file, or a package tree) and its version: `ask` (the `--version`
   * probe) runs only when this (path, inode, size, mtime) has no version recorded; a known answer is kept with the
   * identity, an unknown one (null) is asked again next time.
   */
  readonly probed: (
    path: string,
    kind: "file" | "tree",
    ask: Effect.Effect<string | null, HarnessError>
  ) => Effect.Effect<Probed, HarnessError>
  /** Every recorded verify run. */
  readonly verifications: Effect.Effect<ReadonlyArray<VerifyRun>, HarnessError>
  /** Record verify runs: each replaces the earlier runs of its control for the same version and executable. */
  readonly record: (runs: ReadonlyArray<VerifyRun>) => Effect.Effect<void, HarnessError>
}

/** An executable's identity digest and the version it answered, or null when unknown. */
export interface Probed {
  readonly digest: Sha256Hex
  readonly version: string | null
}

const failure = (detail: string) => (cause: unknown) =>
  new HarnessError({ reason: "probe_failed", detail: `${detail}: ${cause instanceof Error ? cause.message : cause}` })

const readJson = <A>(path: string, schema: Schema.Schema<A, string>, empty: A) =>
  Effect.tryPromise({ try: () => readFile(path, "utf-8"), catch: failure(`cannot read ${path}`) }).pipe(
    Effect.catchIf(
      () => true,
      (error) => error.detail.includes("ENOENT") ? Effect.succeed<string | undefined>(undefined) : Effect.fail(error)
    ),
    Effect.flatMap((text) =>
      text === undefined
        ? Effect.succeed(empty)
        : Schema.decode(schema)(text).pipe(Effect.mapError(failure(`${path} is not a harness store file`)))
    )
  )

const writeJson = <A>(path: string, schema: Schema.Schema<A, string>, value: A) =>
  Effect.gen(function*() {
    const text = yield* Schema.encode(schema)(value).pipe(Effect.mapError(failure(`cannot encode ${path}`)))
    const temporary = `${path}.${process.pid}.tmp`
    yield* Effect.tryPromise({
      try: async () => {
        await mkdir(dirname(path), { recursive: true, mode: 0o700 })
        await writeFile(temporary, text, { mode: 0o600 })
        await rename(temporary, path)
      },
      catch: failure(`cannot write ${path}`)
    })
  })

// A file's read-modify-write under its lock (its directory made first, as the write would).
const locked = <A>(path: string, self: Effect.Effect<A, HarnessError>) =>
  Effect.tryPromise({
    try: () => mkdir(dirname(path), { recursive: true, mode: 0o700 }),
    catch: failure(`cannot create ${dirname(path)}`)
  })
    .pipe(Effect.zipRight(withLock(path, self, failure(`cannot lock ${path}`))))

const hashFile = (path: string) =>
  Effect.async<Sha256Hex, HarnessError>((resume) => {
    const hash = createHash("sha256")
    createReadStream(path)
      .on("data", (chunk) => hash.update(chunk))
      .on("error", (error) => resume(Effect.fail(failure(`cannot read ${path}`)(error))))
      .on("end", () => resume(Effect.succeed(Sha256Hex.make(hash.digest("hex")))))
  })

interface TreeEntry {
  readonly path: string
  readonly link: string | undefined
  readonly size: number
  readonly mtimeMs: number
}

/** Every file and symlink under `root`, in path order (directories walked, not listed; each directory's in parallel). */
const walk = async (root: string): Promise<ReadonlyArray<TreeEntry>> => {
  const visit = async (dir: string): Promise<ReadonlyArray<TreeEntry>> => {
    const names = (await readdir(dir)).sort()
    const found = await Promise.all(names.map(async (name): Promise<ReadonlyArray<TreeEntry>> => {
      const path = join(dir, name)
      const info = await lstat(path)
      if (info.isDirectory()) return visit(path)
      if (info.isSymbolicLink()) return [{ path, link: await readlink(path), size: 0, mtimeMs: info.mtimeMs }]
      return info.isFile() ? [{ path, link: undefined, size: info.size, mtimeMs: info.mtimeMs }] : []
    }))
    return found.flat()
  }
  return visit(root)
}

const hashTree = (root: string, entries: ReadonlyArray<TreeEntry>) =>
  Effect.gen(function*() {
    const tree = createHash("sha256")
    for (const entry of entries) {
      const content = entry.link === undefined ? yield* hashFile(entry.path) : `link:${entry.link}`
      tree.update(`${relative(root, entry.path)}\0${content}\n`)
    }
    return Sha256Hex.make(tree.digest("hex"))
  })

interface Known {
  readonly digest: Sha256Hex
  readonly version?: string
}

/** The store in `dir` (default: `dataDir()`). */
export const make = (dir: string = dataDir()): HarnessStore => {
  const identities = join(dir, "harness", "identity.json")
  const verified = join(dir, "harness", "verify.json")
  const memory = new Map<string, Known>()
  /** A file's key is its own stat; a tree's its root inode, total size and newest mtime over every entry. */
  const keyOf = (path: string, kind: "file" | "tree") =>
    kind === "file"
      ? Effect.map(
        Effect.tryPromise({ try: () => stat(path), catch: failure(`cannot stat ${path}`) }),
        (info) => ({ key: { path, ino: info.ino, size: info.size, mtime_ms: info.mtimeMs }, hash: hashFile(path) })
      )
      : Effect.map(
        Effect.tryPromise({
          try: () => Promise.all([stat(path), walk(path)]),
          catch: failure(`cannot walk ${path}`)
        }),
        ([info, entries]) => ({
          key: {
            path,
            ino: info.ino,
            size: entries.reduce((sum, e) => sum + e.size, 0),
            mtime_ms: entries.reduce((newest, e) => Math.max(newest, e.mtimeMs), info.mtimeMs)
          },
          hash: hashTree(path, entries)
        })
      )
  const known = (path: string, kind: "file" | "tree", ask?: Effect.Effect<string | null, HarnessError>) =>
    Effect.gen(function*() {
      const { hash, key } = yield* keyOf(path, kind)
      const name = JSON.stringify(key)
      const remembered = memory.get(name)
      if (remembered !== undefined && (ask === undefined || remembered.version !== undefined)) return remembered
      const entries = yield* readJson(identities, IdentityFile, [])
      const cached = entries.find((e) =>
        e.path === key.path && e.ino === key.ino && e.size === key.size && e.mtime_ms === key.mtime_ms
      )
      const digest = remembered?.digest ?? cached?.digest ?? (yield* hash)
      const version = cached?.version ?? (ask === undefined ? undefined : (yield* ask) ?? undefined)
      const entry = { ...key, digest, ...(version === undefined ? {} : { version }) }
      memory.set(name, entry)
      if (cached === undefined || cached.version !== version) {
        yield* locked(
          identities,
          Effect.flatMap(
            readJson(identities, IdentityFile, []),
            (latest) => writeJson(identities, IdentityFile, [...latest.filter((e) => e.path !== path), entry])
          )
        )
      }
      return entry
    })
  return {
    dir,
    identity: (path) => Effect.map(known(path, "file"), (entry) => entry.digest),
    treeIdentity: (root) => Effect.map(known(root, "tree"), (entry) => entry.digest),
    probed: (path, kind, ask) =>
      Effect.map(known(path, kind, ask), (entry) => ({ digest: entry.digest, version: entry.version ?? null })),
    verifications: readJson(verified, VerifyFile, []),
    record: (runs) =>
      locked(
        verified,
        Effect.flatMap(readJson(verified, VerifyFile, []), (earlier) => {
          const same = (a: VerifyRun, b: VerifyRun) =>
            a.control === b.control && a.provider_version === b.provider_version &&
            a.executable_digest === b.executable_digest
          const kept = earlier.filter((old) => !runs.some((run) => same(old, run)))
          return writeJson(verified, VerifyFile, [...kept, ...runs])
        })
      )
  }
}
