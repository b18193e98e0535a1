// What the interop scripts share: the pinned official SDK loaded from
// .ci/tools/node_modules (STARLOG_NODE_TOOLS), and the output the Go tests
// parse: one `PASS <name>` or `FAIL <name>: <reason>` line per scenario,
// then `N passed, M failed`, and the exit code.

import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const SDK_PACKAGE = "@s2-dev/streamstore";
const SDK_VERSION = "0.27.0";

function nodeToolsDir() {
  if (process.env.STARLOG_NODE_TOOLS) return process.env.STARLOG_NODE_TOOLS;
  const here = path.dirname(fileURLToPath(import.meta.url));
  return path.resolve(here, "..", "..", "..", "..", ".ci", "tools", "node_modules");
}

// loadSDK imports the pinned SDK, or reports a failed setup and exits.
export async function loadSDK() {
  try {
    const dir = path.join(nodeToolsDir(), SDK_PACKAGE);
    const pkg = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8"));
    if (pkg.version !== SDK_VERSION) throw new Error(`${SDK_PACKAGE} is ${pkg.version}, want ${SDK_VERSION}`);
    const entry = pkg.exports?.["."]?.import?.default ?? pkg.module;
    return await import(pathToFileURL(path.join(dir, entry)).href);
  } catch (e) {
    console.log(`FAIL setup: ${e.message}`);
    console.log("0 passed, 1 failed");
    process.exit(1);
  }
}

export function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

// within rejects when p has not settled within ms.
export const within = (p, ms, what) => {
  let timer;
  const t = new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`${what}: nothing within ${ms} ms`)), ms); });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
};

const results = [];

// scenario runs fn and prints its PASS or FAIL line.
export async function scenario(name, fn) {
  try {
    await fn();
    results.push(true);
    console.log(`PASS ${name}`);
  } catch (e) {
    results.push(false);
    console.log(`FAIL ${name}: ${String(e?.stack ?? e?.message ?? e).replace(/\n/g, " | ")}`);
  }
}

// finish prints the totals and exits 0 only if every scenario passed.
export function finish() {
  const passed = results.filter(Boolean).length;
  console.log(`${passed} passed, ${results.length - passed} failed`);
  process.exit(passed === results.length ? 0 : 1);
}
