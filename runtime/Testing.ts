/**
 * writ/testing: a property-test harness for one's own policy and actions (`check`, `diff`, the executor's laws), and
 * the fast-check arbitraries and deterministic test layers it is built from (wire-form declarations, requests, context
 * bindings, invocation contexts, evaluator inputs). Runtimes: every one (fast-check and WebCrypto are plain JavaScript).
 */
export * from "./testing/Calls.ts"
export * from "./testing/Declarations.ts"
export * from "./testing/Diff.ts"
export * from "./testing/Harness.ts"
export * from "./testing/Invocations.ts"
export * from "./testing/Laws.ts"
export * from "./testing/Report.ts"
