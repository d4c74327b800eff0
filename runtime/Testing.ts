/**
 * writ/testing: fast-check arbitraries for property-based tests of policies and calls (wire-form
 * declarations, requests, context bindings, invocation contexts, evaluator inputs) and deterministic
 * test layers. Runtimes: every one (fast-check and WebCrypto are plain JavaScript).
 */
export * from "./testing/Declarations.ts"
export * from "./testing/Invocations.ts"
