// The official S2 TypeScript SDK (@s2-dev/streamstore, pinned in .ci/tools)
// reading missing streams in a basin with createStreamOnRead, with the
// read's streamConfig (the s2-stream-config header) (issue 29 item 3). A
// readSession from seq 0 bounded by a count cannot follow, so on the new,
// empty stream it fails 416 (RangeNotSatisfiableError, tail 0), as S2; the
// stream is created anyway, with the config the read named, and a unary
// read with streamConfig likewise. Then getConfig answers that config,
// and an append and a read go on as on any stream.
//
// Environment and output as conformance.mjs.

import { check, finish, loadSDK, scenario, within } from "./harness.mjs";

const STEP_TIMEOUT_MS = 15_000;

const sdk = await loadSDK();
const { S2, AppendInput, AppendRecord, RangeNotSatisfiableError } = sdk;
process.on("unhandledRejection", (e) => console.error(`unhandled rejection: ${e?.stack ?? e}`));

const s2 = new S2({
  accessToken: process.env.S2_ACCESS_TOKEN,
  endpoints: { account: process.env.S2_ACCOUNT_ENDPOINT, basin: process.env.S2_BASIN_ENDPOINT },
  retry: { maxAttempts: 1 },
});
const runId = Math.random().toString(36).slice(2, 10).padEnd(8, "0");
const basin = `cor-${runId}`;
await s2.basins.create({ basin, config: { createStreamOnRead: true } });

const config = (age) => ({ retentionPolicy: { ageSecs: age }, timestamping: { mode: "arrival" } });

// rangeErr runs fn and returns its 416, failing on anything else.
async function rangeErr(what, fn) {
  let err;
  try {
    await within(fn(), STEP_TIMEOUT_MS, what);
  } catch (e) {
    err = e;
  }
  check(err instanceof RangeNotSatisfiableError && err.status === 416 && err.tail?.seqNum === 0,
    `${what}: got ${err ? `${err.constructor?.name} ${err.status} ${err.message}` : "no error"}, want 416 with tail 0`);
}

async function checkConfig(name, age) {
  const cfg = await s2.basin(basin).streams.getConfig({ stream: name });
  check(cfg.retentionPolicy?.ageSecs === age, `getConfig of ${name}: retention ${JSON.stringify(cfg.retentionPolicy)}, want age ${age}`);
  check(cfg.timestamping?.mode === "arrival", `getConfig of ${name}: timestamping ${JSON.stringify(cfg.timestamping)}, want arrival`);
}

for (const [i, transport] of ["fetch", "s2s"].entries()) {
  await scenario(`create-on-read-with-config/${transport}`, async () => {
    const name = `made-by-session-${transport}`;
    const age = 1000 + i;
    const st = s2.basin(basin).stream(name, transport === "fetch" ? { forceTransport: "fetch" } : {});
    await rangeErr(`readSession/${transport} on the missing ${name}`, async () => {
      const s = await st.readSession({ start: { from: { seqNum: 0 } }, stop: { limits: { count: 1 } }, streamConfig: config(age) });
      const r = await s.getReader().read();
      check(false, `readSession/${transport} on a new, empty stream gave ${JSON.stringify(r)}`);
    });
    const t = await st._transportPromise;
    check(t?.constructor?.name === (transport === "fetch" ? "FetchTransport" : "S2STransport"), `session transport ${t?.constructor?.name}`);
    await checkConfig(name, age);

    // A unary read with streamConfig creates its stream too.
    const uname = `made-by-read-${transport}`;
    const u = s2.basin(basin).stream(uname, transport === "fetch" ? { forceTransport: "fetch" } : {});
    await rangeErr(`read of the missing ${uname}`, () => u.read({ start: { from: { seqNum: 0 } }, streamConfig: config(age + 100) }));
    await checkConfig(uname, age + 100);

    // The created stream is a stream like any other.
    const ack = await st.append(AppendInput.create([AppendRecord.string({ body: "first" })]));
    check(ack.start.seqNum === 0, `append to ${name}: ack start ${ack.start.seqNum}`);
    const got = await st.read({ start: { from: { seqNum: 0 } } });
    check(got.records.length === 1 && got.records[0].body === "first", `read of ${name}: ${JSON.stringify(got.records)}`);
  });
}

finish();
