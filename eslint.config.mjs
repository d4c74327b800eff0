import effect from "@effect/eslint-plugin";
import importX from "eslint-plugin-import-x";
import tseslint from "typescript-eslint";

const nodeOnly = [
  "node:*",
  "fs",
  "path",
  "os",
  "crypto",
  "child_process",
  "url",
  "util",
  "stream",
  "http",
  "https",
  "net",
  "worker_threads",
]
  .map((name) => ({ group: [name, `${name}/*`], message: "core/ is runtime-agnostic: no Node built-ins" }));
const nodeOnlyPackages = [
  "@effect/platform-node",
  "@effect/platform-node-shared",
  "@effect/sql-sqlite-node",
  "better-sqlite3",
  "@effect/cli",
  "@effect/platform",
  "**/adapters",
  "**/runtime",
]
  .map((name) => ({ group: [name, `${name}/*`], message: "core/ imports only effect" }));

// Node 20's V8 adds each key to an object cloned by a leading spread through a new map of its own, about 0.8 µs a key
// and garbage for the collector (measured: `{ ...a, x: 1 }` 0.9 µs, `Object.assign({}, a, { x: 1 })` 0.1 µs).
const leadingSpread = {
  selector: "ObjectExpression > SpreadElement:first-child + *",
  message: "a literal opening with a spread and adding keys costs ~0.8 µs a key on Node 20: Object.assign",
};

const coreSyntax = [{
  selector: "MemberExpression[object.name='globalThis'][property.name=/^(process|Deno|Buffer|Bun)$/]",
  message: "core/ is runtime-agnostic",
}, {
  selector: "CallExpression[callee.object.name='Date'][callee.property.name='now']",
  message: "core/ takes time from Effect's Clock",
}, {
  selector: "CallExpression[callee.object.name='Math'][callee.property.name='random']",
  message: "core/ takes randomness from Effect's Random or IdGenerator",
}];

export default [
  { ignores: ["dist/**", "node_modules/**"] },
  ...tseslint.configs.recommended,
  ...effect.configs.dprint,
  {
    files: ["**/*.ts"],
    rules: {
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-namespace": ["error", { allowDeclarations: true }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 120,
          semiColons: "asi",
          quoteStyle: "alwaysDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force",
        },
      }],
    },
  },
  {
    files: ["core/**/*.ts", "adapters/**/*.ts", "runtime/**/*.ts", "bench/**/*.ts"],
    plugins: { "import-x": importX },
    settings: {
      "import-x/resolver-next": [importX.createNodeResolver()],
      "import-x/extensions": [".ts", ".js", ".mjs"],
      "import-x/parsers": { "@typescript-eslint/parser": [".ts"] },
    },
    rules: { "import-x/no-cycle": ["error", { ignoreExternal: true }], "import-x/no-unresolved": "error" },
  },
  {
    // The edge handler runs under deno serve and on edge platforms: it too is portable.
    files: ["adapters/memory/**/*.ts", "adapters/sql/**/*.ts", "adapters/web/**/*.ts", "runtime/edge/**/*.ts"],
    rules: {
      "no-restricted-imports": ["error", {
        patterns: [
          ...nodeOnly.map((pattern) => ({
            ...pattern,
            message: "a portable adapter runs on every runtime: no Node built-ins",
          })),
          ...[
            "@effect/platform-node",
            "@effect/platform-node-shared",
            "@effect/sql-sqlite-node",
            "better-sqlite3",
            "**/node",
            "**/runtime",
          ]
            .map((name) => ({ group: [name, `${name}/*`], message: "a portable adapter imports no Node-only module" })),
        ],
      }],
    },
  },
  {
    files: ["core/**/*.ts"],
    rules: {
      "max-lines": ["error", { max: 400 }],
      "max-lines-per-function": ["error", { max: 100 }],
    },
  },
  {
    files: ["core/**/*.ts"],
    rules: {
      "no-restricted-imports": ["error", { patterns: [...nodeOnly, ...nodeOnlyPackages] }],
      "no-restricted-globals": [
        "error",
        { name: "process", message: "core/ is runtime-agnostic" },
        { name: "Buffer", message: "core/ is runtime-agnostic: use Uint8Array" },
        { name: "Deno", message: "core/ is runtime-agnostic" },
        { name: "require", message: "core/ is ESM and runtime-agnostic" },
        { name: "__dirname", message: "core/ is runtime-agnostic" },
        { name: "setTimeout", message: "core/ takes time from Effect's Clock" },
        { name: "setInterval", message: "core/ takes time from Effect's Clock" },
      ],
      "no-restricted-syntax": ["error", ...coreSyntax],
    },
  },
  {
    // The code every call or every projected record runs.
    files: [
      "core/execution/internal/**/*.ts",
      "core/evidence/internal/**/*.ts",
      "core/policy/internal/**/*.ts",
      "core/execution/Interceptor.ts",
      "core/evidence/EvidenceProjector.ts",
    ],
    // The ingress copies objects its callers built, which may hold an own `__proto__` that Object.assign would set.
    ignores: ["core/execution/internal/ingress.ts"],
    rules: { "no-restricted-syntax": ["error", ...coreSyntax, leadingSpread] },
  },
];
