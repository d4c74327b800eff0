/** The little of better-sqlite3 (which ships no types) that writ's synchronous evidence commit uses. */
declare module "better-sqlite3" {
  interface Statement {
    readonly reader: boolean
    readonly all: (...params: ReadonlyArray<unknown>) => Array<unknown>
    readonly run: (...params: ReadonlyArray<unknown>) => unknown
    raw(toggle: boolean): Statement
  }
  class Database {
    constructor(filename: string)
    readonly inTransaction: boolean
    exec(source: string): unknown
    prepare(source: string): Statement
    pragma(source: string): unknown
    close(): unknown
  }
  export default Database
}
