/**
 * The executor's private one-use invocation token, as backends see it: they can only spend one.
 */
export type { InvocationToken } from "./internal/token.ts"
export { redeem } from "./internal/token.ts"
