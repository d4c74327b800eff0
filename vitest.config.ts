import { defineConfig } from "vitest/config"

// Shared 2-core machines run these suites under heavy load: a timeout here means "stuck", never "slow".
export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Worker threads started from source (the evidence commit thread) load their `.ts` script through these hooks.
    poolOptions: {
      forks: { execArgv: ["--import", new URL("./test/fixtures/typescript-hooks.mjs", import.meta.url).pathname] }
    }
  }
})
