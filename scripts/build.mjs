#!/usr/bin/env node
/**
 * Build dist/: compile with tsc, then stamp dist/ with the time the build started, so that a source changed during
 * the build still reads as newer than it (`isStale`). The tests build through `ensureBuilt`, once per change.
 */
import { execFile } from "node:child_process";
import {
  chmodSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const stamp = join(root, "dist", ".built");
const lock = join(root, "dist", ".building");

/** What the build reads: a change to any of these makes dist/ stale. */
const inputs = [
  "core",
  "adapters",
  "runtime",
  "bench",
  "scripts",
  "package.json",
  "tsconfig.base.json",
  "tsconfig.build.json",
];

const newest = (path) => {
  const stat = statSync(path, { throwIfNoEntry: false });
  if (stat === undefined) return 0;
  if (!stat.isDirectory()) return stat.mtimeMs;
  return readdirSync(path).reduce((latest, name) => Math.max(latest, newest(join(path, name))), stat.mtimeMs);
};

/** Whether dist/ is missing or older than any input. */
export const isStale = () => {
  const built = statSync(stamp, { throwIfNoEntry: false });
  return built === undefined || inputs.some((input) => newest(join(root, input)) > built.mtimeMs);
};

/** Compile and stamp, without blocking the caller's thread: the compiler's exit status and output. */
export const build = async () => {
  const started = new Date();
  const tsc = await new Promise((done) =>
    execFile(
      process.execPath,
      [join(root, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.build.json"],
      { cwd: root, encoding: "utf-8", maxBuffer: 64 << 20 },
      (error, stdout, stderr) => done({ status: error === null ? 0 : 1, stdout: `${stdout}${stderr}` }),
    )
  );
  if (tsc.status === 0) {
    chmodSync(join(root, "dist/runtime/node/bin.js"), 0o755);
    writeFileSync(stamp, "");
    utimesSync(stamp, started, started);
  }
  return tsc;
};

const alive = (pid) => {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const holderOf = (file) => {
  try {
    return Number(readFileSync(file, "utf-8"));
  } catch {
    return undefined;
  }
};

/** Take the build lock (a file naming its holder, linked into place whole), or say which live process holds it. */
const tryLock = () => {
  const mine = `${lock}.${process.pid}`;
  writeFileSync(mine, String(process.pid));
  try {
    linkSync(mine, lock);
    return undefined;
  } catch {
    const holder = holderOf(lock);
    if (holder !== undefined && alive(holder)) return holder;
    // Released meanwhile, or left by a process that died building: take it.
    if (holder !== undefined) rmSync(lock, { force: true });
    return tryLock();
  } finally {
    rmSync(mine, { force: true });
  }
};

/** Build when dist/ is stale, one process at a time: concurrent callers wait for the one building. */
export const ensureBuilt = async () => {
  mkdirSync(dirname(lock), { recursive: true });
  for (;;) {
    if (!isStale()) return { status: 0, stdout: "" };
    if (tryLock() === undefined) {
      try {
        return isStale() ? await build() : { status: 0, stdout: "" };
      } finally {
        rmSync(lock, { force: true });
      }
    }
    await new Promise((wake) => setTimeout(wake, 250));
  }
};

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { status, stdout } = await build();
  process.stdout.write(stdout);
  process.exit(status);
}
