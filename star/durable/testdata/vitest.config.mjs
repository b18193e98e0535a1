// Runs the official Durable Streams conformance suite
// (@durable-streams/server-conformance-tests, pinned in .ci/tools) as its
// own CLI does, against CONFORMANCE_TEST_URL. The CLI's `vitest run <file>`
// finds no test when the package is installed (vitest excludes
// node_modules), so this config includes the package's runner explicitly
// and nothing else; every test of the suite runs, none is filtered.
export default {
  test: {
    include: ["node_modules/@durable-streams/server-conformance-tests/dist/test-runner.js"],
    exclude: [],
    passWithNoTests: false,
  },
}
