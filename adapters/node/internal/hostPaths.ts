/**
 * Host paths a subprocess backend grants its child: the module graph it loads (as package directories) and the
 * executables it starts.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** The nearest directory at or above `start` holding a package.json (or `start` when none does). */
export const packageRoot = (start: string): string => {
  for (let dir = start;; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, "package.json"))) return dir
    if (path.dirname(dir) === dir) return start
  }
}

/**
 * The module graph a child loads, as directories: the package of each module given (the writ package the runner is
 * in, and the action's own), and the real directory of each one's node_modules when that is a link elsewhere.
 */
export const moduleRoots = (modules: ReadonlyArray<string>): ReadonlyArray<string> => {
  const roots = new Set<string>()
  for (const module of modules) {
    const file = module.startsWith("file:") ? fileURLToPath(module) : module
    const root = fs.realpathSync(packageRoot(path.dirname(file)))
    roots.add(root)
    const modulesDir = path.join(root, "node_modules")
    if (fs.existsSync(modulesDir)) {
      const real = fs.realpathSync(modulesDir)
      if (real !== modulesDir) roots.add(real)
    }
  }
  return [...roots]
}

const executable = (file: string) => {
  try {
    fs.accessSync(file, fs.constants.X_OK)
    return fs.statSync(file).isFile()
  } catch {
    return false
  }
}

/** The path of an executable file: `name` itself where it holds a `/`, else found on `searchPath`; or undefined. */
export const which = (name: string, searchPath: string | undefined): string | undefined =>
  name.includes("/")
    ? executable(name) ? name : undefined
    : (searchPath ?? "/usr/bin:/bin").split(":").filter((dir) => dir !== "").map((dir) => path.join(dir, name))
      .find(executable)

/**
 * The names at the top of a write root that stay read-only: the shell rc files and the git directory, which a user's
 * next shell or git command would run code from.
 */
export const protectedFiles: ReadonlyArray<string> = [".bashrc", ".bash_profile", ".profile", ".zshrc", ".zprofile"]

/** The protected paths of a write root: its shell rc files and its `.git`. */
export const protectedPaths = (root: string): ReadonlyArray<string> =>
  [...protectedFiles, ".git"].map((name) => path.join(root, name))
