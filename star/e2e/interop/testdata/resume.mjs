// The official S2 TypeScript SDK (@s2-dev/streamstore, pinned in .ci/tools)
// resuming a read after its connection drops. The SDK talks to the star
// through a TCP relay in this script that can cut every connection at once;
// the records are appended over a direct client.
//
//   - sse-last-event-id: the SDK's generated SSE client (the client of
//     every S2Stream, its `sse.get`) reconnects with the same URL and the
//     `Last-Event-ID` of the last event it saw. The star must resume after
//     that id (S2: `<seq_num>,<count>,<bytes>` of what was delivered) and
//     count the read's limit from it: every record once, then [DONE]. It
//     is cut twice, so the ids must go on counting from the resumed one.
//     (A read with a count limit waits for new records only with `wait`,
//     as in S2: the default wait of a bounded read is 0.)
//   - read-session-resume/{fetch,s2s}: the SDK's readSession on each
//     transport (SSE over HTTP/1.1, S2S over HTTP/2) with retries on:
//     after the cut its retry layer reopens the read after the last record
//     it delivered, with the limit reduced; every record once, in order.
//
// Environment and output as conformance.mjs.

import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { check, finish, loadSDK, scenario, within } from "./harness.mjs";

const STEP_TIMEOUT_MS = 30_000;

// Relay forwards TCP connections to the star; cut() destroys every one
// open (the client sees its response body end in an error) and counts the
// connections it accepted, so a scenario can see the SDK reconnect.
class Relay {
  constructor(target) {
    this.target = new URL(target);
    this.pairs = new Set();
    this.accepted = 0;
    this.server = net.createServer((c) => {
      this.accepted++;
      const u = net.connect(Number(this.target.port), this.target.hostname);
      const pair = [c, u];
      this.pairs.add(pair);
      const drop = () => { c.destroy(); u.destroy(); this.pairs.delete(pair); };
      c.on("error", drop).on("close", drop);
      u.on("error", drop).on("close", drop);
      c.pipe(u);
      u.pipe(c);
    });
  }
  async listen() {
    await new Promise((res) => this.server.listen(0, "127.0.0.1", res));
    return `http://127.0.0.1:${this.server.address().port}`;
  }
  cut() {
    const n = this.pairs.size;
    for (const [c, u] of this.pairs) {
      c.resetAndDestroy?.() ?? c.destroy();
      u.destroy();
    }
    this.pairs.clear();
    return n;
  }
  close() {
    this.cut();
    this.server.close();
  }
}

const sdk = await loadSDK();
const { S2, AppendInput, AppendRecord } = sdk;
process.on("unhandledRejection", (e) => console.error(`unhandled rejection: ${e?.stack ?? e}`));

const endpoint = process.env.S2_BASIN_ENDPOINT;
const token = process.env.S2_ACCESS_TOKEN;
const direct = new S2({
  accessToken: token,
  endpoints: { account: process.env.S2_ACCOUNT_ENDPOINT, basin: endpoint },
  retry: { maxAttempts: 1 },
});
const relay = new Relay(endpoint);
const relayed = await relay.listen();
// Through the relay, with the SDK's retries on: a dropped session is
// resumed (three attempts, short delays).
const viaRelay = new S2({
  accessToken: token,
  endpoints: { account: relayed, basin: relayed },
  retry: { maxAttempts: 3, minBaseDelayMillis: 50, maxBaseDelayMillis: 200 },
});
const runId = Math.random().toString(36).slice(2, 10).padEnd(8, "0");
const basin = `resume-${runId}`;
await direct.basins.create({ basin, config: { createStreamOnAppend: true } });

const body = (i) => `record-${String(i).padStart(4, "0")}`;
async function appendRange(stream, from, to) {
  const ack = await direct.basin(basin).stream(stream, { forceTransport: "fetch" }).append(
    AppendInput.create(Array.from({ length: to - from }, (_, k) => AppendRecord.string({ body: body(from + k) }))));
  check(ack.start.seqNum === from && ack.end.seqNum === to, `append ${from}..${to}: ack ${ack.start.seqNum}..${ack.end.seqNum}`);
}

// checkOnce: seqs are exactly 0..n-1 in order, each with its body.
function checkOnce(records, n, what) {
  const seqs = records.map((r) => r.seq_num ?? r.seqNum);
  const want = Array.from({ length: n }, (_, i) => i);
  check(JSON.stringify(seqs) === JSON.stringify(want), `${what}: seq nums ${JSON.stringify(seqs)}, want 0..${n - 1} once each`);
  records.forEach((r, i) => check(r.body === body(i), `${what}: seq ${i} body ${JSON.stringify(r.body)}, want ${body(i)}`));
}

const HALF = 10;
const TOTAL = 2 * HALF;

// Three phases of PHASE records, the connection cut after each of the
// first two: the second resume shows the ids count from the resumed one
// (the client keeps sending the first query's count).
const PHASE = 10;
const PHASES = 3;

await scenario("sse-last-event-id", async () => {
  const name = "lei";
  const total = PHASE * PHASES;
  await appendRange(name, 0, PHASE);
  // The generated client of an S2Stream is the SDK's own (0.27.0 keeps it
  // in the private `client` field); its sse.get is the SDK's SSE client
  // with Last-Event-ID reconnection.
  const st = viaRelay.basin(basin).stream(name, { forceTransport: "fetch" });
  check(st.client?.sse?.get, "S2Stream.client.sse.get missing in the SDK");
  const ids = [];
  const reconnects = [];
  const ac = new AbortController();
  const { stream: events } = await st.client.sse.get({
    security: [{ scheme: "bearer", type: "http" }],
    url: "/streams/{stream}/records",
    path: { stream: name },
    query: { seq_num: 0, count: total, wait: 60 },
    headers: { accept: "text/event-stream" },
    signal: ac.signal,
    sseDefaultRetryDelay: 50,
    sseMaxRetryAttempts: 5,
    onSseEvent: (ev) => { if (ev.event === "batch") ids.push(ev.id); },
    onSseError: (e) => reconnects.push(String(e?.message ?? e)),
  });
  const it = events[Symbol.asyncIterator]();
  const records = [];
  let done = false;
  const next = async (what) => {
    const r = await within(it.next(), STEP_TIMEOUT_MS, what);
    if (r.done) return false;
    if (r.value === "[DONE]") { done = true; return false; }
    if (r.value && typeof r.value === "object" && Array.isArray(r.value.records)) records.push(...r.value.records);
    return true;
  };
  for (let p = 1; p < PHASES; p++) {
    while (records.length < p * PHASE) {
      check(await next(`records to ${p * PHASE - 1} (have ${records.length})`), `SSE read ended after ${records.length} records`);
    }
    const lastId = ids.at(-1);
    check(/^\d+,\d+,\d+$/.test(lastId ?? ""), `event id ${JSON.stringify(lastId)}, want <seq_num>,<count>,<bytes>`);
    check(lastId.startsWith(`${p * PHASE - 1},${p * PHASE},`), `event id after ${p * PHASE} records ${lastId}, want ${p * PHASE - 1},${p * PHASE},<bytes>`);
    const before = relay.accepted;
    check(relay.cut() > 0, "no open connection to cut");
    await appendRange(name, p * PHASE, (p + 1) * PHASE);
    // The next record comes over a new connection.
    const have = records.length;
    while (records.length === have) {
      check(await next(`records after cut ${p} (have ${records.length})`), `SSE read ended after cut ${p} with ${records.length} records (errors seen: ${JSON.stringify(reconnects)})`);
    }
    check(relay.accepted > before, `the SDK's SSE client did not reconnect after cut ${p} (errors seen: ${JSON.stringify(reconnects)})`);
  }
  while (!done && records.length <= total) {
    if (!(await next(`records after the cuts (have ${records.length})`))) break;
  }
  ac.abort();
  console.error(`sse-last-event-id: ${relay.accepted} connections, event ids ${ids.join(" ")}, reconnects on ${JSON.stringify(reconnects)}`);
  checkOnce(records, total, "SSE read resumed with Last-Event-ID");
  check(done, `the resumed read did not end with [DONE] after its count (${records.length} records)`);
  check(ids.at(-1)?.startsWith(`${total - 1},${total},`), `last event id ${ids.at(-1)}, want ${total - 1},${total},<bytes>`);
});

for (const transport of ["fetch", "s2s"]) {
  await scenario(`read-session-resume/${transport}`, async () => {
    const name = `rs-${transport}`;
    await appendRange(name, 0, HALF);
    const st = viaRelay.basin(basin).stream(name, transport === "fetch" ? { forceTransport: "fetch" } : {});
    const session = await st.readSession({ start: { from: { seqNum: 0 } }, stop: { limits: { count: TOTAL }, waitSecs: 60 } });
    const t = await st._transportPromise;
    check(t?.constructor?.name === (transport === "fetch" ? "FetchTransport" : "S2STransport"),
      `session transport ${t?.constructor?.name}`);
    const reader = session.getReader();
    const records = [];
    while (records.length < HALF) {
      const r = await within(reader.read(), STEP_TIMEOUT_MS, `record ${records.length}`);
      check(!r.done, `session ended after ${records.length} records`);
      records.push(r.value);
    }
    const before = relay.accepted;
    check(relay.cut() > 0, "no open connection to cut");
    await appendRange(name, HALF, TOTAL);
    for (;;) {
      const r = await within(reader.read(), STEP_TIMEOUT_MS, `record ${records.length} after the cut`);
      if (r.done) break;
      records.push(r.value);
      if (records.length > TOTAL) break;
    }
    check(relay.accepted > before, "the SDK did not reconnect after the cut");
    checkOnce(records, TOTAL, `readSession/${transport} resumed after a dropped connection`);
  });
}

relay.close();
finish();
