// The official S2 TypeScript SDK (@s2-dev/streamstore, pinned in .ci/tools)
// against a star that shuts down (SIGTERM, the Go test passes its pid in
// STAR_PID): its read sessions (S2S and SSE) and a long poll end with S2's
// 503 server_draining, which the SDK treats as side-effect free.
//
// Environment and output as conformance.mjs, plus STAR_PID.
// Retries are off (maxAttempts: 1), so the SDK shows the star's answer.

import { check, finish, loadSDK, scenario } from "./harness.mjs";

const sdk = await loadSDK();
const { S2, AppendInput, AppendRecord, S2Error } = sdk;
const s2 = new S2({
  accessToken: process.env.S2_ACCESS_TOKEN,
  endpoints: { account: process.env.S2_ACCOUNT_ENDPOINT, basin: process.env.S2_BASIN_ENDPOINT },
  retry: { maxAttempts: 1 },
});
const starPid = Number(process.env.STAR_PID);
const runId = Math.random().toString(36).slice(2, 10).padEnd(8, "0");
const basin = `drain-${runId}`;
await s2.basins.create({ basin, config: { createStreamOnAppend: true } });

const within = (p, ms, what) => Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`${what}: nothing within ${ms} ms`)), ms))]);
const describe = (e) => `${e?.constructor?.name} status=${e?.status} code=${e?.code} message=${e?.message}`;

// Open sessions on both transports and a long poll, then SIGTERM the star:
// each ends with S2's server_draining, which the SDK counts as side-effect
// free (hasNoSideEffects), so its retry layer resumes at once.
const s2sStream = s2.basin(basin).stream("s");
const fetchStream = s2.basin(basin).stream("s", { forceTransport: "fetch" });
await s2sStream.append(AppendInput.create([AppendRecord.string({ body: "first" })]));
const s2sRead = await s2sStream.readSession({ start: { from: { seqNum: 0 } } });
const s2sReader = s2sRead.getReader();
const first = await within(s2sReader.read(), 10_000, "first record of the S2S read session");
const sseRead = await fetchStream.readSession({ start: { from: { seqNum: 0 } } });
const sseReader = sseRead.getReader();
await within(sseReader.read(), 10_000, "first record of the SSE read session");
const pend = (p) => p.then((v) => ({ v }), (e) => ({ e }));
// Read until the session fails (heartbeats and records come first).
const untilError = async (reader) => {
  for (;;) {
    const r = await pend(reader.read());
    if (r.e || r.v.done) return r;
  }
};
const s2sEnd = untilError(s2sReader);
const sseEnd = untilError(sseReader);
const poll = pend(fetchStream.read({ start: { from: { seqNum: 1 } }, stop: { waitSecs: 30 } }));
await new Promise((r) => setTimeout(r, 500)); // the long poll is in
process.kill(starPid, "SIGTERM");

await scenario("s2s-read-session", async () => {
  check(first.value?.body === "first", `first record ${JSON.stringify(first.value?.body)}`);
  const r = await within(s2sEnd, 20_000, "end of the S2S read session");
  // On server_draining the SDK reconnects at once, outside its attempt
  // budget; the star refuses new sessions with server_draining until its
  // listener closes, so the session ends with server_draining or, once
  // the star is gone, a refused connection: never the 503 unavailable of
  // a lease lost in the shutdown.
  check(r.e instanceof S2Error && (r.e.status === 503 && r.e.code === "server_draining" && r.e.hasNoSideEffects() || r.e.code === "ECONNREFUSED"),
    `S2S read session on drain: got ${r.e ? describe(r.e) : "a clean end"}, want 503 server_draining (side-effect free) or, after the SDK's reconnects, ECONNREFUSED`);
});
await scenario("sse-read-session", async () => {
  const r = await within(sseEnd, 20_000, "end of the SSE read session");
  // The SDK turns an SSE error event into a 503 carrying the event's body.
  check(r.e instanceof S2Error && r.e.status === 503 && String(r.e.message).includes("server_draining"),
    `SSE read session on drain: got ${r.e ? describe(r.e) : "a clean end"}, want 503 with server_draining`);
});
await scenario("unary-long-poll", async () => {
  const r = await within(poll, 20_000, "the long poll");
  check(r.e instanceof S2Error && r.e.status === 503 && r.e.code === "server_draining" && r.e.hasNoSideEffects(),
    `long poll on drain: got ${r.e ? describe(r.e) : JSON.stringify(r.v)}, want 503 server_draining, side-effect free`);
});

finish();
