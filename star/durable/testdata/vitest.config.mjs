// Runs the official Durable Streams conformance suite
// (@durable-streams/server-conformance-tests, pinned in .ci/tools) with
// subscriptions enabled, through conformance.mjs beside this file (the
// package's CLI cannot: it never enables them, and from an installed
// package its `vitest run <file>` finds no test, since vitest excludes
// node_modules). Only that runner is collected; nothing is filtered.
import { fileURLToPath } from "node:url"

export default {
  test: {
    dir: fileURLToPath(new URL(".", import.meta.url)),
    include: ["conformance.mjs"],
    exclude: [],
    passWithNoTests: false,
  },
}
