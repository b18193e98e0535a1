// Conformance of a star against the official S2 TypeScript SDK
// (@s2-dev/streamstore, pinned in .ci/tools): the ten scenarios of API.md §5,
// then access tokens (11) and the S2 fidelity scenarios of issue 16 (12-14).
// The session scenarios (3, 8, 9) run twice, once over the fetch transport
// (HTTP/1.1: SSE reads, unary appends) and once over the SDK's default on
// Node (S2S frames over cleartext HTTP/2).
//
// Environment: S2_ACCOUNT_ENDPOINT, S2_BASIN_ENDPOINT, S2_ACCESS_TOKEN, and
// STARLOG_NODE_TOOLS (the node_modules folder holding the SDK; defaults to
// <repo>/.ci/tools/node_modules).
//
// Output: one line per scenario on stdout, `PASS <name>` or
// `FAIL <name>: <reason>`, then `N passed, M failed`; exit status 1 on any
// failure. For a failure, stderr gets the HTTP/1.1 exchanges the scenario
// made (request and response, bodies truncated) so a report can quote them.
//
// Retries are switched off (maxAttempts: 1): with the SDK's default of three
// attempts a server error, a missing heartbeat or a dropped session would be
// hidden by a silent reconnect.

import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

const SDK_PACKAGE = "@s2-dev/streamstore";
const SDK_VERSION = "0.27.0";
const SCENARIO_TIMEOUT_MS = 55_000;
const IDLE_SESSION_MS = 30_000;

// ---------------------------------------------------------------- SDK import

function nodeToolsDir() {
  if (process.env.STARLOG_NODE_TOOLS) return process.env.STARLOG_NODE_TOOLS;
  const here = path.dirname(fileURLToPath(import.meta.url));
  return path.resolve(here, "..", "..", "..", "..", ".ci", "tools", "node_modules");
}

// The script lives outside .ci/tools, so a bare import would not find the
// package: resolve its ESM entry from its own package.json.
async function importSDK() {
  const dir = path.join(nodeToolsDir(), SDK_PACKAGE);
  let pkg;
  try {
    pkg = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8"));
  } catch (e) {
    throw new Error(`${SDK_PACKAGE} not installed under ${dir} (run \`make tools\`): ${e.message}`);
  }
  if (pkg.version !== SDK_VERSION) {
    throw new Error(`${SDK_PACKAGE} is ${pkg.version} under ${dir}, want ${SDK_VERSION} (run \`make tools\`)`);
  }
  const entry = pkg.exports?.["."]?.import?.default ?? pkg.module;
  if (!entry) throw new Error(`${SDK_PACKAGE}: no ESM entry in package.json`);
  return import(pathToFileURL(path.join(dir, entry)).href);
}

// ------------------------------------------------------- HTTP exchange log

// Every fetch the SDK makes (all unary calls, and the sessions of the fetch
// transport) is recorded so a failing scenario can show its exact requests
// and responses. S2S sessions go through node:http2 and are not seen here.
const exchanges = [];
const MAX_EXCHANGES = 20_000;
const MAX_BODY = 400;

function renderBody(buf, contentType) {
  if (buf.length === 0) return "<empty>";
  const textual = /json|text|event-stream/.test(contentType ?? "");
  const shown = textual
    ? buf.subarray(0, MAX_BODY).toString("utf8")
    : `hex:${buf.subarray(0, MAX_BODY / 2).toString("hex")}`;
  return buf.length > (textual ? MAX_BODY : MAX_BODY / 2) ? `${shown}…(${buf.length} bytes)` : shown;
}

function installFetchLog() {
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    if (!(input instanceof Request) || init !== undefined) return realFetch(input, init);
    const url = new URL(input.url);
    const entry = {
      at: new Date().toISOString(),
      method: input.method,
      target: url.pathname + url.search,
      reqHeaders: ["s2-basin", "content-type", "accept", "s2-format"]
        .filter((h) => input.headers.has(h))
        .map((h) => `${h}: ${input.headers.get(h)}`)
        .join("; "),
      reqBody: "",
      status: "no response",
      resType: "",
      resBody: "",
    };
    if (exchanges.length >= MAX_EXCHANGES) exchanges.shift();
    exchanges.push(entry);
    if (input.body) {
      try {
        entry.reqBody = renderBody(Buffer.from(await input.clone().arrayBuffer()), input.headers.get("content-type"));
      } catch (e) {
        entry.reqBody = `<unreadable: ${e.message}>`;
      }
    }
    let res;
    try {
      res = await realFetch(input);
    } catch (e) {
      entry.status = `fetch error: ${e.cause?.code ?? ""} ${e.message}`;
      throw e;
    }
    entry.status = String(res.status);
    entry.resType = res.headers.get("content-type") ?? "";
    if (entry.resType.includes("event-stream")) {
      entry.resBody = "<event stream>";
    } else {
      // Read a copy in the background: awaiting it here would delay the SDK.
      res.clone().arrayBuffer().then(
        (b) => { entry.resBody = renderBody(Buffer.from(b), entry.resType); },
        (e) => { entry.resBody = `<unreadable: ${e.message}>`; },
      );
    }
    return res;
  };
}

function exchangesFor(names, limit = 8) {
  const keys = [...names].map((n) => encodeURIComponent(n));
  const mine = exchanges.filter((x) => keys.some((k) => x.target.includes(k) || x.reqBody.includes(k)));
  return mine.slice(-limit).map(
    (x) => `${x.at} ${x.method} ${x.target} [${x.reqHeaders}] body=${x.reqBody || "<none>"}\n` +
      `      -> ${x.status} [${x.resType}] body=${x.resBody || "<none>"}`,
  );
}

// ------------------------------------------------------------- assertions

class Failure extends Error {}

function fail(msg) {
  throw new Failure(msg);
}

function check(cond, msg) {
  if (!cond) fail(msg);
}

function show(v) {
  return JSON.stringify(v, (_k, x) => {
    if (x instanceof Uint8Array) return `hex:${Buffer.from(x).toString("hex")}`;
    if (typeof x === "bigint") return `${x}n`;
    return x;
  });
}

function equal(actual, expected, what) {
  const a = show(actual);
  const e = show(expected);
  if (a !== e) fail(`${what}: got ${a}, want ${e}`);
}

function describeError(e) {
  if (!(e instanceof Error)) return show(e);
  const parts = [`${e.constructor.name}`];
  for (const k of ["status", "code", "expectedSeqNum", "expectedFencingToken"]) {
    if (e[k] !== undefined) parts.push(`${k}=${show(e[k])}`);
  }
  if (e.tail) parts.push(`tail=${show({ seqNum: e.tail.seqNum, timestamp: e.tail.timestamp?.getTime?.() })}`);
  parts.push(`message=${show(e.message)}`);
  return parts.join(" ");
}

// rejects runs fn and returns the error it throws; resolving is a failure.
async function rejects(what, fn) {
  let value;
  try {
    value = await fn();
  } catch (e) {
    if (e instanceof Failure) throw e;
    return e;
  }
  fail(`${what}: succeeded (${show(value)}), want an error`);
}

async function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Failure(`${what}: no result after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

const ms = (d) => d.getTime();

function bytesEqual(a, b) {
  return a instanceof Uint8Array && b instanceof Uint8Array && Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;
}

// ------------------------------------------------------------- main

const sdk = await importSDK().catch((e) => {
  console.log(`FAIL setup: ${e.message}`);
  console.log("0 passed, 1 failed");
  process.exit(1);
});
const {
  S2, AppendInput, AppendRecord, S2Error,
  SeqNumMismatchError, FencingTokenMismatchError, RangeNotSatisfiableError,
} = sdk;

const env = {
  account: process.env.S2_ACCOUNT_ENDPOINT,
  basin: process.env.S2_BASIN_ENDPOINT,
  token: process.env.S2_ACCESS_TOKEN,
};
if (!env.account || !env.basin || !env.token) {
  console.log("FAIL setup: S2_ACCOUNT_ENDPOINT, S2_BASIN_ENDPOINT and S2_ACCESS_TOKEN must be set");
  console.log("0 passed, 1 failed");
  process.exit(1);
}

installFetchLog();
// An SDK promise nobody awaits must not crash the run before the summary.
process.on("unhandledRejection", (e) => console.error(`unhandled rejection: ${describeError(e)}`));
const s2 = new S2({
  accessToken: env.token,
  endpoints: { account: env.account, basin: env.basin },
  retry: { maxAttempts: 1 },
});

const runId = Math.random().toString(36).slice(2, 10).padEnd(8, "0");
const basinName = `interop-${runId}`;
const openStreams = [];

// TRANSPORTS maps a variant to the stream options and the SDK's transport
// class it must select; the class is checked so the default variant cannot
// silently fall back to fetch.
const TRANSPORTS = {
  fetch: { options: { forceTransport: "fetch" }, className: "FetchTransport" },
  s2s: { options: {}, className: "S2STransport" },
};

// Context is what a scenario works with: fresh, uniquely named streams in
// the shared basin, remembered so a failure can show their HTTP exchanges.
class Context {
  constructor(name) {
    this.name = name;
    this.names = new Set();
  }

  streamName(suffix) {
    const n = `${this.name.replace(/[^a-z0-9-]/g, "-")}-${suffix}-${runId}`;
    this.names.add(n);
    return n;
  }

  handle(basin, name, transport = "s2s") {
    const s = s2.basin(basin).stream(name, TRANSPORTS[transport].options);
    openStreams.push(s);
    return s;
  }

  // create makes a fresh stream with config and returns its handle.
  async create(suffix, { config, transport } = {}) {
    const name = this.streamName(suffix);
    const info = await s2.basin(basinName).streams.create({ stream: name, ...(config ? { config } : {}) });
    equal(info.name, name, `streams.create(${name}).name`);
    return this.handle(basinName, name, transport);
  }

  async checkTransport(stream, transport) {
    // _transportPromise is the SDK's private, lazily created session
    // transport (0.27.0); reading it is the only way to see which one ran.
    const t = await stream._transportPromise;
    const got = t?.constructor?.name;
    equal(got, TRANSPORTS[transport].className, `session transport of the ${transport} variant`);
  }
}

async function appendStrings(stream, bodies, options) {
  return stream.append(AppendInput.create(bodies.map((body) => AppendRecord.string({ body })), options));
}

function checkAck(ack, start, count, what) {
  equal(ack.start.seqNum, start, `${what}: ack.start.seqNum`);
  equal(ack.end.seqNum, start + count, `${what}: ack.end.seqNum`);
  check(ack.tail.seqNum >= ack.end.seqNum, `${what}: ack.tail.seqNum ${ack.tail.seqNum} < end ${ack.end.seqNum}`);
  check(ms(ack.end.timestamp) >= ms(ack.start.timestamp), `${what}: ack end timestamp before start`);
}

function checkContiguous(records, first, what) {
  records.forEach((r, i) => {
    equal(r.seqNum, first + i, `${what}: seqNum of record ${i}`);
    if (i > 0) {
      check(ms(r.timestamp) >= ms(records[i - 1].timestamp),
        `${what}: timestamp of seq ${r.seqNum} (${ms(r.timestamp)}) below seq ${r.seqNum - 1} (${ms(records[i - 1].timestamp)})`);
    }
  });
}

// readAll drains a session (or any async iterable of records) until it ends.
async function drain(session, max = 100_000) {
  const out = [];
  for await (const r of session) {
    out.push(r);
    if (out.length >= max) break;
  }
  return out;
}

// take reads n records from a session reader within ms.
async function take(reader, n, timeoutMs, what) {
  const out = [];
  const deadline = Date.now() + timeoutMs;
  while (out.length < n) {
    const left = deadline - Date.now();
    if (left <= 0) fail(`${what}: got ${out.length} of ${n} records within ${timeoutMs} ms`);
    const r = await withTimeout(reader.read(), left, `${what}: record ${out.length + 1} of ${n}`);
    if (r.done) fail(`${what}: session ended after ${out.length} of ${n} records`);
    out.push(r.value);
  }
  return out;
}

// ---------------------------------------------------------------- scenarios

const scenarios = [];
const scenario = (name, fn) => scenarios.push({ name, fn });

// 1. Provisioning.
scenario("1-provisioning", async (ctx) => {
  const autoBasin = `interop-auto-${runId}`;
  ctx.names.add(autoBasin);
  const info = await s2.basins.create({
    basin: autoBasin,
    config: { createStreamOnAppend: true, createStreamOnRead: true },
  });
  equal(info.name, autoBasin, "basins.create name");
  check(info.createdAt instanceof Date && !Number.isNaN(ms(info.createdAt)), `basins.create createdAt ${show(info.createdAt)}`);
  const bcfg = await s2.basins.getConfig({ basin: autoBasin });
  equal(bcfg.createStreamOnAppend, true, "basin config createStreamOnAppend");
  equal(bcfg.createStreamOnRead, true, "basin config createStreamOnRead");
  const listed = await s2.basins.list({ prefix: autoBasin });
  equal(listed.basins.map((b) => b.name), [autoBasin], "basins.list({prefix}) names");

  const name = ctx.streamName("full");
  const config = {
    storageClass: "express",
    retentionPolicy: { ageSecs: 86_400 },
    timestamping: { mode: "client-require", uncapped: true },
    deleteOnEmpty: { minAgeSecs: 3_600 },
  };
  const created = await s2.basin(autoBasin).streams.create({ stream: name, config });
  equal(created.name, name, "streams.create name");
  const got = await s2.basin(autoBasin).streams.getConfig({ stream: name });
  equal(
    {
      storageClass: got.storageClass,
      retentionPolicy: got.retentionPolicy,
      timestamping: { mode: got.timestamping?.mode, uncapped: got.timestamping?.uncapped },
      deleteOnEmpty: got.deleteOnEmpty,
    },
    config,
    "streams.getConfig round trip",
  );
  const streams = await s2.basin(autoBasin).streams.list({ prefix: name });
  equal(streams.streams.map((s) => s.name), [name], "streams.list({prefix}) names");
  const tail = await ctx.handle(autoBasin, name).checkTail();
  equal(tail.tail.seqNum, 0, "checkTail of a new stream");

  // createStreamOnAppend: an append to a missing stream creates it.
  const autoName = ctx.streamName("autocreated");
  const ack = await appendStrings(ctx.handle(autoBasin, autoName), ["first"]);
  checkAck(ack, 0, 1, "append to a missing stream with createStreamOnAppend");
  const after = await s2.basin(autoBasin).streams.list({ prefix: autoName });
  equal(after.streams.map((s) => s.name), [autoName], "streams.list after auto-create");
});

// 2. String append with headers.
scenario("2-string-append", async (ctx) => {
  const stream = await ctx.create("s");
  const batches = [
    [
      { body: "hello", headers: [["k1", "v1"], ["k2", "v2"]] },
      { body: "héllo ✓ 日本", headers: [["lang", "ünï"]] },
      { body: "no headers" },
    ],
    [
      { body: "second batch", headers: [["k1", "again"]] },
      { body: "x".repeat(3000) },
    ],
  ];
  let next = 0;
  for (const [i, batch] of batches.entries()) {
    const ack = await stream.append(AppendInput.create(batch.map((r) => AppendRecord.string(r))));
    checkAck(ack, next, batch.length, `append batch ${i}`);
    next += batch.length;
  }
  const out = await stream.read({ start: { from: { seqNum: 0 } } });
  const want = batches.flat();
  equal(out.records.length, want.length, "records read from seq 0");
  checkContiguous(out.records, 0, "read from seq 0");
  out.records.forEach((r, i) => {
    equal(r.body, want[i].body, `body of seq ${i}`);
    equal(r.headers.map(([n, v]) => [n, v]), want[i].headers ?? [], `headers of seq ${i}`);
  });
  const tail = await stream.checkTail();
  equal(tail.tail.seqNum, want.length, "checkTail after appends");
});

// 3. Binary round trip (protobuf append and read), then a bytes readSession.
const BINARY = [
  { body: new Uint8Array([0x00, 0xff, 0x00, 0x7f, 0x80, 0xfe, 0xff]), headers: [[new Uint8Array([0x68, 0x00, 0xff]), new Uint8Array([0xff, 0x00])]] },
  { body: Uint8Array.from({ length: 256 }, (_, i) => i), headers: [] },
  { body: new Uint8Array([0xff]), headers: [[new Uint8Array([0x01]), new Uint8Array([])]] },
  { body: new Uint8Array([0xc3, 0x28, 0x00]), headers: [[new Uint8Array([0xc3, 0x28]), new Uint8Array([0xa0, 0xa1, 0x00])]] },
];

function checkBinary(records, what) {
  equal(records.length, BINARY.length, `${what}: record count`);
  records.forEach((r, i) => {
    equal(r.seqNum, i, `${what}: seqNum ${i}`);
    check(bytesEqual(r.body, BINARY[i].body), `${what}: body of seq ${i}: got ${show(r.body)}, want ${show(BINARY[i].body)}`);
    equal(r.headers.length, BINARY[i].headers.length, `${what}: header count of seq ${i}`);
    r.headers.forEach(([n, v], j) => {
      const [wn, wv] = BINARY[i].headers[j];
      check(bytesEqual(n, wn) && bytesEqual(v, wv),
        `${what}: header ${j} of seq ${i}: got ${show([n, v])}, want ${show([wn, wv])}`);
    });
  });
}

for (const transport of Object.keys(TRANSPORTS)) {
  scenario(`3-binary-roundtrip/${transport}`, async (ctx) => {
    const stream = await ctx.create("b", { transport });
    const ack = await stream.append(AppendInput.create(BINARY.map((r) => AppendRecord.bytes(r))));
    checkAck(ack, 0, BINARY.length, "bytes append");
    const unary = await stream.read({ start: { from: { seqNum: 0 } } }, { as: "bytes" });
    checkBinary(unary.records, "read as bytes");
    const session = await stream.readSession(
      { start: { from: { seqNum: 0 } }, stop: { limits: { count: BINARY.length } } },
      { as: "bytes" },
    );
    await ctx.checkTransport(stream, transport);
    const records = await withTimeout(drain(session), 15_000, "readSession as bytes to its count");
    checkBinary(records, "readSession as bytes");
  });
}

// 4. matchSeqNum.
scenario("4-match-seq-num", async (ctx) => {
  const stream = await ctx.create("m");
  checkAck(await appendStrings(stream, ["a", "b"], { matchSeqNum: 0 }), 0, 2, "append with matchSeqNum 0");
  checkAck(await appendStrings(stream, ["c"], { matchSeqNum: 2 }), 2, 1, "append with matchSeqNum 2");
  const err = await rejects("append with stale matchSeqNum 1", () => appendStrings(stream, ["stale"], { matchSeqNum: 1 }));
  check(err instanceof SeqNumMismatchError, `stale matchSeqNum: got ${describeError(err)}, want SeqNumMismatchError`);
  equal(err.status, 412, "stale matchSeqNum status");
  equal(err.expectedSeqNum, 3, "stale matchSeqNum expectedSeqNum");
  const ahead = await rejects("append with matchSeqNum 7 ahead of the tail", () => appendStrings(stream, ["ahead"], { matchSeqNum: 7 }));
  check(ahead instanceof SeqNumMismatchError && ahead.expectedSeqNum === 3,
    `matchSeqNum ahead of the tail: got ${describeError(ahead)}, want SeqNumMismatchError expectedSeqNum=3`);
  equal((await stream.checkTail()).tail.seqNum, 3, "tail after the rejected appends");
  checkAck(await appendStrings(stream, ["d"], { matchSeqNum: 3 }), 3, 1, "append with matchSeqNum 3");
});

// 5. Fencing tokens.
scenario("5-fencing", async (ctx) => {
  const stream = await ctx.create("f");
  checkAck(await stream.append(AppendInput.create([AppendRecord.fence("w1")])), 0, 1, "fence(w1)");
  checkAck(await appendStrings(stream, ["by w1"], { fencingToken: "w1" }), 1, 1, "append with token w1");
  const err = await rejects("append with token w2", () => appendStrings(stream, ["by w2"], { fencingToken: "w2" }));
  check(err instanceof FencingTokenMismatchError, `token w2: got ${describeError(err)}, want FencingTokenMismatchError`);
  equal(err.status, 412, "token w2 status");
  equal(err.expectedFencingToken, "w1", "token w2 expectedFencingToken");
  checkAck(await appendStrings(stream, ["no token"]), 2, 1, "append without a token");
  checkAck(await stream.append(AppendInput.create([AppendRecord.fence("")], { fencingToken: "w1" })), 3, 1, "fence('') with token w1");
  const cleared = await rejects("append with token w1 after the clear", () => appendStrings(stream, ["stale w1"], { fencingToken: "w1" }));
  check(cleared instanceof FencingTokenMismatchError && cleared.expectedFencingToken === "",
    `token w1 after fence(''): got ${describeError(cleared)}, want FencingTokenMismatchError expectedFencingToken=""`);
  checkAck(await appendStrings(stream, ["free"]), 4, 1, "append after the clear");
  const out = await stream.read({ start: { from: { seqNum: 0 } } });
  equal(out.records.map((r) => r.body), ["w1", "by w1", "no token", "", "free"], "bodies read back (commands included)");
  equal(out.records[0].headers, [["", "fence"]], "fence command headers read back");
});

// 6. Read edges.
scenario("6-read-edges", async (ctx) => {
  const empty = await ctx.create("empty");
  let err = await rejects("read from 0 on an empty stream", () => empty.read({ start: { from: { seqNum: 0 } } }));
  check(err instanceof RangeNotSatisfiableError, `empty stream read: got ${describeError(err)}, want RangeNotSatisfiableError`);
  equal(err.status, 416, "empty stream read status");
  equal(err.tail?.seqNum, 0, "empty stream read tail.seqNum");

  const base = Date.now() - 60_000;
  const s = await ctx.create("small");
  const ack = await s.append(AppendInput.create(
    [0, 10, 20, 30].map((d, i) => AppendRecord.string({ body: `r${i}`, timestamp: base + d }))));
  checkAck(ack, 0, 4, "append with timestamps");

  err = await rejects("read past the tail", () => s.read({ start: { from: { seqNum: 100 } } }));
  check(err instanceof RangeNotSatisfiableError && err.status === 416 && err.tail?.seqNum === 4,
    `read at seq 100 past tail 4: got ${describeError(err)}, want 416 with tail.seqNum 4`);
  err = await rejects("clamped read past the tail without wait", () => s.read({ start: { from: { seqNum: 100 }, clamp: true } }));
  check(err instanceof RangeNotSatisfiableError && err.status === 416,
    `clamp=true past the tail, no wait: got ${describeError(err)}, want 416`);

  let out = await s.read({ start: { from: { tailOffset: 10 } } });
  equal(out.records.map((r) => r.seqNum), [0, 1, 2, 3], "tailOffset 10 on 4 records");
  out = await s.read({ start: { from: { tailOffset: 1 } } });
  equal(out.records.map((r) => r.seqNum), [3], "tailOffset 1");

  out = await s.read({ start: { from: { timestamp: base + 15 } } });
  equal(out.records.map((r) => r.seqNum), [2, 3], "timestamp start base+15");
  out = await s.read({ start: { from: { seqNum: 0 } }, stop: { untilTimestamp: base + 20 } });
  equal(out.records.map((r) => r.seqNum), [0, 1], "until base+20 is exclusive");
  err = await rejects("timestamp start at until", () =>
    s.read({ start: { from: { timestamp: base + 20 } }, stop: { untilTimestamp: base + 20 } }));
  check(err instanceof S2Error && err.status === 422, `start timestamp = until: got ${describeError(err)}, want 422`);
  err = await rejects("timestamp start past until", () =>
    s.read({ start: { from: { timestamp: base + 30 } }, stop: { untilTimestamp: base + 20 } }));
  check(err instanceof S2Error && err.status === 422, `start timestamp > until: got ${describeError(err)}, want 422`);

  out = await s.read({ start: { from: { seqNum: 0 } }, stop: { limits: { count: 0 } } });
  equal(out.records.length, 0, "count 0 record count");

  const big = await ctx.create("big");
  checkAck(await appendStrings(big, Array.from({ length: 1000 }, (_, i) => `b${i}`)), 0, 1000, "append 1000");
  checkAck(await appendStrings(big, Array.from({ length: 200 }, (_, i) => `b${1000 + i}`)), 1000, 200, "append 200");
  out = await big.read({ start: { from: { seqNum: 0 } }, stop: { limits: { count: 5000 } } });
  equal(out.records.length, 1000, "count 5000 is capped at 1000");
  checkContiguous(out.records, 0, "count 5000");
  equal(out.records[999].body, "b999", "body of seq 999");
});

// 7. Long poll.
scenario("7-long-poll", async (ctx) => {
  const s = await ctx.create("lp");
  await appendStrings(s, ["before"]);
  let t0 = Date.now();
  const poll = s.read({ start: { from: { tailOffset: 0 } }, stop: { waitSecs: 3 } });
  await sleep(500);
  const ack = await appendStrings(s, ["late"]);
  const out = await poll;
  const took = Date.now() - t0;
  equal(out.records.map((r) => [r.seqNum, r.body]), [[ack.start.seqNum, "late"]], "long poll records");
  check(took < 2900, `long poll returned after ${took} ms, want it as soon as the record arrived (~500 ms)`);

  t0 = Date.now();
  const idle = await s.read({ start: { from: { tailOffset: 0 } }, stop: { waitSecs: 3 } });
  const idleMs = Date.now() - t0;
  equal(idle.records.length, 0, "idle long poll record count");
  check(idleMs >= 2900 && idleMs < 8000, `idle long poll returned after ${idleMs} ms, want about 3000`);
});

// 8. Tailing readSession.
for (const transport of Object.keys(TRANSPORTS)) {
  scenario(`8-tailing-read-session/${transport}`, async (ctx) => {
    const live = await ctx.create("live", { transport });
    await appendStrings(live, ["old0", "old1"]);
    const session = await live.readSession({ start: { from: { tailOffset: 0 } } });
    await ctx.checkTransport(live, transport);
    // The session reports the tail once it follows live (the heartbeat on
    // entering live follow); appending only then keeps the start unambiguous.
    const caught = await withTimeout(session.caughtUp(), 10_000, "caughtUp() of a session started at the tail");
    equal(caught.seqNum, 2, "caught-up tail");
    const reader = session.getReader();
    const acks = await Promise.all([0, 1, 2].map((b) =>
      live.append(AppendInput.create([0, 1].map((i) => AppendRecord.string({ body: `batch${b}-${i}` }))))));
    const got = await take(reader, 6, 10_000, "tailing session");
    checkContiguous(got, 2, "tailing session");
    const bodyAt = new Map();
    for (const [b, a] of acks.entries()) {
      bodyAt.set(a.start.seqNum, `batch${b}-0`);
      bodyAt.set(a.start.seqNum + 1, `batch${b}-1`);
    }
    got.forEach((r) => equal(r.body, bodyAt.get(r.seqNum), `tailing session body of seq ${r.seqNum}`));
    await withTimeout(reader.cancel("done"), 5_000, "cancel of the tailing session");

    const w = await ctx.create("wait", { transport });
    await appendStrings(w, ["x"]);
    const t0 = Date.now();
    const ws = await w.readSession({ start: { from: { tailOffset: 0 } }, stop: { waitSecs: 2 } });
    const rest = await withTimeout(drain(ws), 15_000, "session with waitSecs 2");
    const took = Date.now() - t0;
    equal(rest.length, 0, "session with waitSecs 2: record count");
    check(took >= 1950 && took < 10_000, `session with waitSecs 2 ended after ${took} ms, want ≥ 2000`);

    const idle = await ctx.create("idle", { transport });
    const is = await idle.readSession({ start: { from: { tailOffset: 0 } } });
    const ir = is.getReader();
    // Keep a read pending through the idle period: a session error (no
    // heartbeat for the SDK's 20–25 s) would settle it.
    let settled;
    const pending = ir.read().then(
      (r) => { settled = { r }; return r; },
      (e) => { settled = { e }; throw e; },
    );
    pending.catch(() => {});
    await sleep(IDLE_SESSION_MS);
    if (settled?.e) fail(`idle session failed within ${IDLE_SESSION_MS} ms: ${describeError(settled.e)}`);
    if (settled) fail(`idle session yielded ${show(settled.r)} with nothing appended`);
    check(is.lastObservedTail() !== undefined, "idle session never reported a tail (no heartbeat seen)");
    const a = await appendStrings(idle, ["after idle"]);
    const r = await withTimeout(pending, 10_000, "record appended after 30 s idle");
    check(!r.done, "idle session ended instead of delivering the record appended after the idle period");
    equal([r.value.seqNum, r.value.body], [a.start.seqNum, "after idle"], "record after idle");
    await withTimeout(ir.cancel("done"), 5_000, "cancel of the idle session");
  });
}

// 9. appendSession.
for (const transport of Object.keys(TRANSPORTS)) {
  scenario(`9-append-session/${transport}`, async (ctx) => {
    const stream = await ctx.create("as", { transport });
    // The SDK starts a batch's 5 s ack timer when it hands the batch to the
    // transport. S2S pipelines every batch on one HTTP/2 stream; the fetch
    // transport sends one POST at a time, so 100 queued batches would need
    // 100 acks of ~60 ms (a Standard stream's 50 ms flush interval) inside
    // one timer. Bounding the batches in flight keeps each timer honest.
    const session = await stream.appendSession(transport === "fetch" ? { maxInflightBatches: 10 } : undefined);
    await ctx.checkTransport(stream, transport);
    const sizes = Array.from({ length: 100 }, (_, i) => 1 + (i % 3));
    const acked = new Array(sizes.length);
    const ackPromises = [];
    for (const [i, n] of sizes.entries()) {
      const ticket = await session.submit(AppendInput.create(
        Array.from({ length: n }, (_, j) => AppendRecord.string({ body: `s${i}-${j}` }))));
      const p = ticket.ack().then((a) => { acked[i] = a; return a; });
      p.catch(() => {}); // reported through close() and Promise.all below
      ackPromises.push(p);
    }
    // close() must drain: every ack is in once it resolves.
    await withTimeout(session.close(), 20_000, "appendSession.close()");
    const missing = acked.findIndex((a) => a === undefined);
    check(missing < 0, `close() resolved before the ack of submit ${missing}`);
    await Promise.all(ackPromises);
    let next = 0;
    for (const [i, a] of acked.entries()) {
      checkAck(a, next, sizes[i], `ack of submit ${i}`);
      next += sizes[i];
    }
    const total = next;
    equal((await stream.checkTail()).tail.seqNum, total, "tail after the session");

    const bad = await stream.appendSession();
    const t1 = await bad.submit(AppendInput.create([AppendRecord.string({ body: "stale" })], { matchSeqNum: 0 }));
    const t2 = await bad.submit(AppendInput.create([AppendRecord.string({ body: "after stale" })]));
    const e1 = await rejects("appendSession submit with stale matchSeqNum", () => withTimeout(t1.ack(), 10_000, "ack of the stale submit"));
    check(e1 instanceof S2Error && e1.status === 412,
      `stale matchSeqNum in a session: got ${describeError(e1)}, want status 412`);
    check(!(e1 instanceof SeqNumMismatchError) || e1.expectedSeqNum === total,
      `stale matchSeqNum in a session: expectedSeqNum ${e1.expectedSeqNum}, want ${total}`);
    await rejects("ack of the submit pipelined after the failure", () => withTimeout(t2.ack(), 10_000, "ack of the pipelined submit"));
    await rejects("submit after the session failed", async () => {
      const t3 = await bad.submit(AppendInput.create([AppendRecord.string({ body: "too late" })]));
      return withTimeout(t3.ack(), 10_000, "ack of a submit after the failure");
    });
    await withTimeout(bad.close().catch(() => {}), 10_000, "close() of the failed session");
    equal((await stream.checkTail()).tail.seqNum, total, "tail after the failed session (nothing applied)");

    const out = [];
    while (out.length < total) {
      const b = await stream.read({ start: { from: { seqNum: out.length } } });
      check(b.records.length > 0, `read at ${out.length} returned no records`);
      out.push(...b.records);
    }
    checkContiguous(out, 0, "records of the session");
    const want = sizes.flatMap((n, i) => Array.from({ length: n }, (_, j) => `s${i}-${j}`));
    equal(out.map((r) => r.body), want, "bodies of the session");
  });
}

// 10. Commands, timestamps, deletion.
scenario("10-commands-timestamps-deletion", async (ctx) => {
  const s = await ctx.create("trim");
  await appendStrings(s, Array.from({ length: 10 }, (_, i) => `t${i}`));
  const trimAck = await s.append(AppendInput.create([AppendRecord.trim(5)]));
  checkAck(trimAck, 10, 1, "trim(5)");
  const withCmd = await s.read({ start: { from: { seqNum: 5 } } });
  equal(withCmd.records.map((r) => r.seqNum), [5, 6, 7, 8, 9, 10], "records from 5 after trim(5)");
  equal(withCmd.records[5].headers, [["", "trim"]], "trim command headers read back");
  const raw = await s.read({ start: { from: { seqNum: 10 } } }, { as: "bytes" });
  check(raw.records.length === 1 && bytesEqual(raw.records[0].body, new Uint8Array([0, 0, 0, 0, 0, 0, 0, 5])),
    `trim command body: got ${show(raw.records.map((r) => r.body))}, want 8-byte big-endian 5`);
  const noCmd = await s.read({ start: { from: { seqNum: 5 } }, ignoreCommandRecords: true });
  equal(noCmd.records.map((r) => r.seqNum), [5, 6, 7, 8, 9], "ignoreCommandRecords hides the trim command");

  const req = await ctx.create("require", { config: { timestamping: { mode: "client-require" } } });
  const e = await rejects("client-require append without a timestamp", () => appendStrings(req, ["no ts"]));
  check(e instanceof S2Error && e.status === 422, `client-require without a timestamp: got ${describeError(e)}, want 422`);
  const given = Date.now() - 5_000;
  const reqAck = await req.append(AppendInput.create([AppendRecord.string({ body: "ts", timestamp: given })]));
  equal(ms(reqAck.start.timestamp), given, "client-require keeps the client timestamp");

  const ts = await ctx.create("ts");
  const before = Date.now();
  const future = await ts.append(AppendInput.create([AppendRecord.string({ body: "future", timestamp: before + 3_600_000 })]));
  const after = Date.now();
  const capped = ms(future.start.timestamp);
  check(capped >= before - 1_000 && capped <= after + 1_000,
    `future timestamp: stored ${capped}, want capped to arrival in [${before}, ${after}]`);
  const lower = await ts.append(AppendInput.create([AppendRecord.string({ body: "past", timestamp: before - 3_600_000 })]));
  equal(ms(lower.start.timestamp), capped, "lower timestamp raised to the previous maximum");
  const back = await ts.read({ start: { from: { seqNum: 0 } } });
  equal(back.records.map((r) => ms(r.timestamp)), [capped, capped], "timestamps read back");

  const del = await ctx.create("del");
  await appendStrings(del, ["doomed"]);
  await s2.basin(basinName).streams.delete({ stream: del.name });
  const delStatus = exchanges.filter((x) => x.method === "DELETE" && x.target.endsWith(`/streams/${encodeURIComponent(del.name)}`)).map((x) => x.status);
  equal(delStatus, ["202"], "streams.delete HTTP status");
  const ge = await rejects("getConfig after delete", () => s2.basin(basinName).streams.getConfig({ stream: del.name }));
  check(ge instanceof S2Error && (ge.status === 404 || ge.status === 409),
    `getConfig after delete: got ${describeError(ge)}, want 404 or 409`);
  const ae = await rejects("append after delete", () => appendStrings(del, ["ghost"]));
  check(ae instanceof S2Error && (ae.status === 404 || ae.status === 409),
    `append after delete: got ${describeError(ae)}, want 404 or 409`);
});

// 11: access tokens. The run's token (the star's admin token) issues a
// token scoped to one basin and a stream prefix with auto-prefixing; the
// scoped client appends and reads (unary and an S2S session) under its own
// names, is refused outside its scope, and is refused once revoked.
scenario("11-access-tokens", async (ctx) => {
  const id = `interop/${runId}`;
  const prefix = `tenant-${runId}/`;
  const issued = await s2.accessTokens.issue({
    id,
    autoPrefixStreams: true,
    expiresAt: new Date(Date.now() + 3_600_000),
    scope: {
      basins: { exact: basinName },
      streams: { prefix },
      opGroups: { stream: { read: true, write: true } },
    },
  });
  check(typeof issued.accessToken === "string" && issued.accessToken.length > 20, `issue: got ${show(issued)}`);
  const listed = await s2.accessTokens.list({ prefix: "interop/" });
  const mine = listed.accessTokens.find((t) => t.id === id);
  check(mine !== undefined, `list: ${show(listed)} lacks ${id}`);
  check(mine.autoPrefixStreams === true && mine.scope.streams?.prefix === prefix, `listed info: ${show(mine)}`);
  check(!JSON.stringify(listed).includes(issued.accessToken), "the listing shows the token");

  const scoped = new S2({ accessToken: issued.accessToken, endpoints: { account: env.account, basin: env.basin }, retry: { maxAttempts: 1 } });
  const name = ctx.streamName("scoped");
  const st = scoped.basin(basinName).stream(name, TRANSPORTS.fetch.options);
  openStreams.push(st);
  await scoped.basin(basinName).streams.create({ stream: name });
  await appendStrings(st, ["a", "b"]);
  const back = await st.read({ start: { from: { seqNum: 0 } } });
  equal(back.records.map((r) => r.body), ["a", "b"], "scoped read");
  const sess = scoped.basin(basinName).stream(name);
  openStreams.push(sess);
  const as = await sess.appendSession();
  const ticket = await as.submit(AppendInput.create([AppendRecord.string({ body: "c" })]));
  const ack = await ticket.ack();
  equal(ack.start.seqNum, 2, "scoped S2S append session");
  await as.close();
  // The admin sees the stored name; the tenant lists its own.
  const adminList = await s2.basin(basinName).streams.list({ prefix });
  check(adminList.streams.some((x) => x.name === prefix + name), `admin listing: ${show(adminList.streams.map((x) => x.name))}`);
  const tenantList = await scoped.basin(basinName).streams.list();
  equal(tenantList.streams.map((x) => x.name), [name], "tenant listing");

  const denied = await rejects("basins.list with a stream-only token", () => scoped.basins.list());
  check(denied instanceof S2Error && denied.status === 403, `out of scope: got ${describeError(denied)}, want 403`);
  const other = await rejects("another basin", () => scoped.basin("interop-elsewhere").stream("x", TRANSPORTS.fetch.options).checkTail());
  check(other instanceof S2Error && other.status === 403, `another basin: got ${describeError(other)}, want 403`);
  const bad = new S2({ accessToken: "not-a-token", endpoints: { account: env.account, basin: env.basin }, retry: { maxAttempts: 1 } });
  const unauth = await rejects("a made-up token", () => bad.basins.list());
  check(unauth instanceof S2Error && unauth.status === 401, `made-up token: got ${describeError(unauth)}, want 401`);

  await s2.accessTokens.revoke({ id });
  const deadline = Date.now() + 5_000;
  for (;;) {
    const r = await st.checkTail().then(() => undefined, (e) => e);
    if (r instanceof S2Error && r.status === 401) break;
    check(Date.now() < deadline, `a revoked token still works after 5 s: ${r ? describeError(r) : "ok"}`);
    await sleep(100);
  }
  const after = await s2.accessTokens.list({ prefix: "interop/" });
  check(!after.accessTokens.some((t) => t.id === id), `revoked token still listed: ${show(after)}`);
});

// 12: S2 fidelity (issue 16): the basin default is copied into a stream at
// create; a name being deleted cannot be re-created until its deletion is
// no longer pending (the star runs with --deletion-pending 5s); create is
// idempotent on the request token and the config; ensure reports its
// provision result; bad names are 400; locations; metrics; a storage-class
// change on an open stream.
scenario("12-s2-fidelity", async (ctx) => {
  const b = `interop-fid-${runId}`;
  ctx.names.add(b);
  const info = await s2.basins.create({ basin: b, config: { defaultStreamConfig: { retentionPolicy: { ageSecs: 3600 } } } });
  equal(info.location, "local", "basins.create location");
  const streams = s2.basin(b).streams;
  await streams.create({ stream: "old" });
  await s2.basins.reconfigure({ basin: b, defaultStreamConfig: { retentionPolicy: { ageSecs: 60 }, timestamping: { mode: "arrival" } } });
  const old = await streams.getConfig({ stream: "old" });
  equal([old.retentionPolicy, old.timestamping?.mode], [{ ageSecs: 3600 }, "client-prefer"], "existing stream after the basin default changed");
  await streams.create({ stream: "new" });
  const nu = await streams.getConfig({ stream: "new" });
  equal([nu.retentionPolicy, nu.timestamping?.mode], [{ ageSecs: 60 }, "arrival"], "new stream after the basin default changed");

  // Idempotent create: same token and config is a retry; another config is 409.
  const tok = { headers: { "s2-request-token": `tok-${runId}` } };
  await streams.create({ stream: "idem", config: { storageClass: "express" } }, tok);
  await streams.create({ stream: "idem", config: { storageClass: "express" } }, tok);
  const ce = await rejects("create with the same token, another config", () => streams.create({ stream: "idem", config: { storageClass: "standard" } }, tok));
  check(ce instanceof S2Error && ce.status === 409 && ce.code === "resource_already_exists", `same token, other config: got ${describeError(ce)}, want 409 resource_already_exists`);
  const e1 = await streams.ensure({ stream: "ens" });
  const e2 = await streams.ensure({ stream: "ens" });
  const e3 = await streams.ensure({ stream: "ens", config: { storageClass: "express" } });
  equal([e1.result, e2.result, e3.result], ["created", "noop", "updated"], "streams.ensure provision results");

  // Names.
  const dot = await rejects("create stream \".\"", () => streams.create({ stream: "." }));
  check(dot instanceof S2Error && dot.status === 400 && dot.code === "bad_json", `stream ".": got ${describeError(dot)}, want 400 bad_json`);
  const bad = await rejects("getConfig of a bad basin name", () => s2.basins.getConfig({ basin: "Bad_Name" }));
  check(bad instanceof S2Error && bad.status === 400 && bad.code === "bad_path", `bad basin name: got ${describeError(bad)}, want 400 bad_path`);

  // Deletion pending, then re-creation.
  await streams.create({ stream: "pend" });
  await streams.delete({ stream: "pend" });
  const pe = await rejects("re-create while deletion is pending", () => streams.create({ stream: "pend" }));
  check(pe instanceof S2Error && pe.status === 409 && pe.code === "stream_deletion_pending", `re-create while pending: got ${describeError(pe)}, want 409 stream_deletion_pending`);
  for (const deadline = Date.now() + 30_000; ;) {
    const r = await streams.create({ stream: "pend" }).then(() => undefined, (e) => e);
    if (r === undefined) break;
    check(r instanceof S2Error && r.code === "stream_deletion_pending" && Date.now() < deadline, `re-create after the window: ${describeError(r)}`);
    await sleep(250);
  }

  // Locations.
  equal((await s2.locations.list()).map((l) => [l.name, l.isPrivate]), [["local", false]], "locations.list");
  equal((await s2.locations.getDefault()).name, "local", "locations.getDefault");
  const se = await rejects("locations.setDefault", () => s2.locations.setDefault({ location: "elsewhere" }));
  check(se instanceof S2Error && se.status === 501 && se.code === "not_implemented", `setDefault: got ${describeError(se)}, want 501 not_implemented`);

  // Metrics: what this scenario appended and read, and the stream's storage.
  const st = ctx.handle(b, "new", "fetch");
  await appendStrings(st, ["m1", "m2", "m3"]);
  await st.read({ start: { from: { seqNum: 0 } } });
  const total = (m) => m.accumulation.values.reduce((a, [, v]) => a + v, 0);
  const ops = await s2.metrics.basin({ basin: b, set: "append-ops", interval: "minute" });
  check(ops.values.length === 1 && ops.values[0].accumulation?.unit === "operations" && total(ops.values[0]) === 1,
    `metrics append-ops: ${show(ops)}`);
  check(ops.values[0].accumulation.values.every(([t]) => t instanceof Date), "metrics timestamps are Dates");
  const thr = await s2.metrics.basin({ basin: b, set: "append-throughput", interval: "hour" });
  check(total(thr.values[0]) === 3 * (8 + 2), `metrics append-throughput: ${show(thr)}`);
  const rd = await s2.metrics.basin({ basin: b, set: "read-ops" });
  check(total(rd.values[0]) === 1, `metrics read-ops: ${show(rd)}`);
  const act = await s2.metrics.account({ set: "active-basins" });
  check(act.values[0].label?.values.includes(b), `metrics active-basins: ${show(act)}`);
  for (const deadline = Date.now() + 20_000; ;) {
    const g = await s2.metrics.stream({ basin: b, stream: "new", set: "storage" });
    const v = g.values[0].gauge?.values?.[0]?.[1];
    if (v > 0) break;
    check(Date.now() < deadline, `stream storage still ${show(g)} after 20 s`);
    await sleep(250);
  }

  // A storage-class change on an open stream: appends go on, all readable.
  await streams.reconfigure({ stream: "new", storageClass: "express" });
  await appendStrings(st, ["after"]);
  const back = await st.read({ start: { from: { seqNum: 0 } } });
  equal(back.records.map((r) => r.body), ["m1", "m2", "m3", "after"], "records across the class change");
  equal((await streams.getConfig({ stream: "new" })).storageClass, "express", "storage class after reconfigure");
});

// 13: stream encryption over both transports: a basin with stream_cipher
// aes-256-gcm; a stream handle with the key appends (unary and a session)
// and reads back (unary and a session); without the key it is 400
// bad_header, with another key 400 decryption_failed.
for (const transport of Object.keys(TRANSPORTS)) {
  scenario(`13-encryption/${transport}`, async (ctx) => {
    const b = `interop-enc-${transport}-${runId}`;
    ctx.names.add(b);
    await s2.basins.create({ basin: b, config: { streamCipher: "aes-256-gcm" } });
    const name = ctx.streamName("enc");
    const info = await s2.basin(b).streams.create({ stream: name });
    equal(info.cipher, "aes-256-gcm", "streams.create cipher");
    const key = Buffer.alloc(32, 7).toString("base64");
    const other = Buffer.alloc(32, 9).toString("base64");
    const withKey = (k) => {
      const st = s2.basin(b).stream(name, { ...TRANSPORTS[transport].options, encryptionKey: k });
      openStreams.push(st);
      return st;
    };
    const st = withKey(key);
    await st.append(AppendInput.create([AppendRecord.string({ body: "secret-1", headers: [["k", "v"]] })]));
    const session = await st.appendSession();
    const ticket = await session.submit(AppendInput.create([AppendRecord.string({ body: "secret-2" })]));
    equal((await ticket.ack()).start.seqNum, 1, "encrypted appendSession ack");
    await session.close();
    const back = await st.read({ start: { from: { seqNum: 0 } } });
    equal(back.records.map((r) => [r.body, r.headers]), [["secret-1", [["k", "v"]]], ["secret-2", []]], "encrypted read back");
    const rs = await st.readSession({ start: { from: { seqNum: 0 } }, stop: { limits: { count: 2 } } });
    equal((await withTimeout(drain(rs), 15_000, "encrypted read session")).map((r) => r.body), ["secret-1", "secret-2"], "encrypted read session");
    const plain = s2.basin(b).stream(name, TRANSPORTS[transport].options);
    openStreams.push(plain);
    const ne = await rejects("read without the key", () => plain.read({ start: { from: { seqNum: 0 } } }));
    check(ne instanceof S2Error && ne.status === 400 && ne.code === "bad_header", `read without the key: got ${describeError(ne)}, want 400 bad_header`);
    const we = await rejects("read with another key", () => withKey(other).read({ start: { from: { seqNum: 0 } } }));
    check(we instanceof S2Error && we.status === 400 && we.code === "decryption_failed", `read with another key: got ${describeError(we)}, want 400 decryption_failed`);
    const ae = await rejects("append without the key", () => appendStrings(plain, ["nokey"]));
    check(ae instanceof S2Error && ae.status === 400 && ae.code === "bad_header", `append without the key: got ${describeError(ae)}, want 400 bad_header`);
  });
}

// 14: resources and session features the other scenarios do not reach:
// basins ensure / delete, list paging (limit, startAfter, listAll) of
// basins and streams, createStreamOnRead, arrival timestamping, and S2S
// session compression (gzip: Node 20 has no zstd).
scenario("14-resources-paging-compression", async (ctx) => {
  const b = `interop-pg-${runId}`;
  ctx.names.add(b);
  const e1 = await s2.basins.ensure({ basin: b });
  const e2 = await s2.basins.ensure({ basin: b });
  const e3 = await s2.basins.ensure({ basin: b, config: { createStreamOnRead: true } });
  equal([e1.result, e2.result, e3.result], ["created", "noop", "updated"], "basins.ensure provision results");
  const gone = `interop-gone-${runId}`;
  await s2.basins.create({ basin: gone });
  await s2.basins.delete({ basin: gone });
  const ge = await rejects("getConfig of a deleting basin", () => s2.basins.getConfig({ basin: gone }));
  check(ge instanceof S2Error && ge.status === 409 && ge.code === "basin_deletion_pending", `deleting basin: got ${describeError(ge)}`);

  // Paging: five streams, two at a time.
  const streams = s2.basin(b).streams;
  const names = ["p-a", "p-b", "p-c", "p-d", "p-e"];
  for (const n of names) await streams.create({ stream: n });
  const page1 = await streams.list({ prefix: "p-", limit: 2 });
  equal([page1.streams.map((x) => x.name), page1.hasMore], [["p-a", "p-b"], true], "streams.list page 1");
  const page2 = await streams.list({ prefix: "p-", limit: 2, startAfter: "p-b" });
  equal([page2.streams.map((x) => x.name), page2.hasMore], [["p-c", "p-d"], true], "streams.list page 2");
  const page3 = await streams.list({ prefix: "p-", limit: 2, startAfter: "p-d" });
  equal([page3.streams.map((x) => x.name), page3.hasMore], [["p-e"], false], "streams.list page 3");
  const all = [];
  for await (const x of streams.listAll({ prefix: "p-", limit: 2 })) all.push(x.name);
  equal(all, names, "streams.listAll");
  const bp = await s2.basins.list({ prefix: `interop-pg-${runId}`, limit: 1 });
  equal(bp.basins.map((x) => x.name), [b], "basins.list with limit");
  const ball = [];
  for await (const x of s2.basins.listAll({ prefix: "interop-", limit: 1 })) ball.push(x.name);
  check(ball.includes(b) && ball.includes(basinName), `basins.listAll: ${show(ball)}`);

  // createStreamOnRead: a read of a missing stream creates it.
  const auto = ctx.handle(b, "read-created", "fetch");
  equal((await auto.checkTail()).tail.seqNum, 0, "checkTail creates the stream");
  equal((await streams.list({ prefix: "read-created" })).streams.map((x) => x.name), ["read-created"], "stream created on read");

  // Arrival timestamping ignores the client's timestamp.
  await streams.create({ stream: "arr", config: { timestamping: { mode: "arrival" } } });
  const arr = ctx.handle(b, "arr", "fetch");
  const before = Date.now();
  const ack = await arr.append(AppendInput.create([AppendRecord.string({ body: "a", timestamp: 5 })]));
  check(ms(ack.start.timestamp) >= before - 1_000, `arrival timestamp ${ms(ack.start.timestamp)} below ${before}`);

  // S2S session compression, both ways.
  const zs2 = new S2({ accessToken: env.token, endpoints: { account: env.account, basin: env.basin }, retry: { maxAttempts: 1 }, compression: "gzip" });
  const zs = zs2.basin(b).stream("zipped");
  openStreams.push(zs);
  await streams.create({ stream: "zipped" });
  const big = "z".repeat(8 << 10);
  const as = await zs.appendSession();
  const tickets = [];
  for (let i = 0; i < 5; i++) tickets.push(await as.submit(AppendInput.create([AppendRecord.string({ body: `${i}${big}` })])));
  for (const [i, t] of tickets.entries()) equal((await t.ack()).start.seqNum, i, `compressed session ack ${i}`);
  await as.close();
  const rs = await zs.readSession({ start: { from: { seqNum: 0 } }, stop: { limits: { count: 5 } } });
  const got = await withTimeout(drain(rs), 15_000, "compressed read session");
  equal(got.map((r) => r.body), [0, 1, 2, 3, 4].map((i) => `${i}${big}`), "compressed read session bodies");
});

// ---------------------------------------------------------------- runner

let passed = 0;
let failed = 0;

function report(name, err, names) {
  if (!err) {
    passed++;
    console.log(`PASS ${name}`);
    return;
  }
  failed++;
  const reason = err instanceof Failure ? err.message : describeError(err);
  const lines = exchangesFor(names);
  if (lines.length > 0) {
    console.error(`--- ${name}: last HTTP/1.1 exchanges`);
    for (const l of lines) console.error(`    ${l}`);
  }
  if (!(err instanceof Failure) && err?.stack) console.error(`--- ${name}: ${err.stack}`);
  console.log(`FAIL ${name}: ${reason.replace(/\n/g, " ")}`);
}

const start = Date.now();
let setupError;
try {
  const info = await s2.basins.create({ basin: basinName });
  equal(info.name, basinName, "basins.create name");
} catch (e) {
  setupError = e;
}
if (setupError) {
  report("setup", setupError, new Set([basinName]));
  for (const { name } of scenarios) report(name, new Failure("setup failed"), new Set());
} else {
  // Independent scenarios run concurrently; the 30 s idle session sets the
  // length of the run.
  await Promise.all(scenarios.map(async ({ name, fn }) => {
    const ctx = new Context(name);
    try {
      await withTimeout(fn(ctx), SCENARIO_TIMEOUT_MS, `scenario ${name}`);
      report(name, undefined, ctx.names);
    } catch (e) {
      report(name, e, ctx.names);
    }
  }));
}
// Closing releases pooled HTTP/2 connections; sessions a failed scenario
// left open must not keep the process alive.
await withTimeout(Promise.allSettled(openStreams.map((s) => s.close())), 5_000, "closing streams").catch(() => {});
console.error(`conformance: ${scenarios.length} scenarios against ${env.account} in ${((Date.now() - start) / 1000).toFixed(1)} s`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
