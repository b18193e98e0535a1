// Runs the official Durable Streams conformance suite
// (@durable-streams/server-conformance-tests, pinned in .ci/tools) against
// CONFORMANCE_TEST_URL through the package's exported entry, as its own
// test runner does, but with the subscription tests enabled: the package's
// CLI and runner never pass `subscriptions: true`, so their "Reserved
// subscription APIs" block is skipped. Every test of the suite runs;
// none is filtered.
import { readFileSync } from "node:fs"
import { runConformanceTests } from "../../../.ci/tools/node_modules/@durable-streams/server-conformance-tests/dist/index.js"

const pinned = "0.3.6"
const pkg = JSON.parse(readFileSync(new URL("../../../.ci/tools/node_modules/@durable-streams/server-conformance-tests/package.json", import.meta.url), "utf8"))
if (pkg.version !== pinned) {
  throw new Error(`@durable-streams/server-conformance-tests is ${pkg.version}; this runner is for ${pinned} (.ci/tools/package-lock.json)`)
}
const baseUrl = process.env.CONFORMANCE_TEST_URL
if (!baseUrl) throw new Error("CONFORMANCE_TEST_URL is required")
runConformanceTests({ baseUrl, subscriptions: true })
