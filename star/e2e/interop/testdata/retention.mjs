// The official S2 TypeScript SDK (@s2-dev/streamstore, pinned in .ci/tools)
// against retention by age on a star whose in-process auditor runs fast
// (the Go test starts `star dev` with short auditor, settle and read-grace
// timers). A stream with retention_policy.age of 2 s gets 1.5 MB of
// records, two settled objects' worth, and is read from seq 0 until the
// janitor has trimmed its front (polled, not timed); then, as
// docs/api.md "Trimmed records" says, a read from seq 0 (unary, and a
// readSession on each transport), from a timestamp of 0 and from a tail
// offset below the first retained record starts at the first retained
// record with no error, every record from there to the tail reads back,
// and check-tail is unaffected.
//
// Environment and output as conformance.mjs.

import { setTimeout as sleep } from "node:timers/promises";
import { check, finish, loadSDK, scenario, within } from "./harness.mjs";

const RETENTION_SECS = 2;
const RECORDS = 15; // 100 kB each: 1.5 MB, between one and two output caps
// How long the janitor may take to trim the front: generous, as a slow
// machine is not a failure; the loop ends as soon as it is seen.
const TRIM_DEADLINE_MS = 120_000;
const STEP_TIMEOUT_MS = 30_000;

const sdk = await loadSDK();
const { S2, AppendInput, AppendRecord } = sdk;
process.on("unhandledRejection", (e) => console.error(`unhandled rejection: ${e?.stack ?? e}`));

const s2 = new S2({
  accessToken: process.env.S2_ACCESS_TOKEN,
  endpoints: { account: process.env.S2_ACCOUNT_ENDPOINT, basin: process.env.S2_BASIN_ENDPOINT },
  retry: { maxAttempts: 1 },
});
const runId = Math.random().toString(36).slice(2, 10).padEnd(8, "0");
const basin = `retention-${runId}`;
await s2.basins.create({ basin });
const name = "aged";
const info = await s2.basin(basin).streams.create({ stream: name, config: { retentionPolicy: { ageSecs: RETENTION_SECS } } });
check(info.name === name, `streams.create: ${JSON.stringify(info)}`);
const unary = s2.basin(basin).stream(name, { forceTransport: "fetch" });
// Settled objects grow to the output cap (1 MiB, the least `star dev`
// takes) and trimming drops whole objects, never the stream's last one:
// 100 kB records fill an object in a few appends.
const PAD = "x".repeat(100_000);
const body = (i) => `aged-${String(i).padStart(6, "0")}-${PAD}`;
const short = (b) => JSON.stringify(typeof b === "string" && b.length > 40 ? `${b.slice(0, 20)}…(${b.length})` : b);

// checkRetained: records start above seq 0, run contiguously to the last
// appended one, each with its body.
function checkRetained(records, total, what) {
  check(records.length > 0, `${what}: no records (tail ${total}); the stream's newest records must stay`);
  const first = records[0].seqNum;
  check(first > 0, `${what}: first seq ${first}, want the first retained record (above 0) once the front is trimmed`);
  records.forEach((r, i) => {
    check(r.seqNum === first + i, `${what}: record ${i} has seq ${r.seqNum}, want ${first + i} (contiguous from the first retained)`);
    check(r.body === body(r.seqNum), `${what}: seq ${r.seqNum} body ${short(r.body)}, want ${short(body(r.seqNum))}`);
  });
  const last = records.at(-1).seqNum;
  check(last === total - 1, `${what}: last seq ${last}, want ${total - 1}`);
  return first;
}

// readUnary reads from start with unary reads (each at most 1 MiB), then
// on from after the last record until the tail.
async function readUnary(start) {
  const first = await unary.read({ start: { from: start } });
  const out = [...first.records];
  while (out.length > 0 && out.at(-1).seqNum < total - 1) {
    const more = await unary.read({ start: { from: { seqNum: out.at(-1).seqNum + 1 } } });
    check(more.records.length > 0, `read from ${out.at(-1).seqNum + 1} (tail ${total}): no records`);
    out.push(...more.records);
  }
  return out;
}

// checkFront: before the trim, a read from 0 starts at 0 and runs on.
function checkFront(records, what) {
  records.forEach((r, i) => {
    check(r.seqNum === i, `${what}: record ${i} has seq ${r.seqNum}`);
    check(r.body === body(i), `${what}: seq ${i} body ${short(r.body)}, want ${short(body(i))}`);
  });
}

let total = 0;
let trimmedAt; // the first seq of a read from 0 once the front went

await scenario("retention-trims-front", async () => {
  const cfg = await s2.basin(basin).streams.getConfig({ stream: name });
  check(cfg.retentionPolicy?.ageSecs === RETENTION_SECS, `stream config retention ${JSON.stringify(cfg.retentionPolicy)}`);
  // A fixed set of records, each its own append: more than one output cap,
  // less than two, so once settled the stream has two objects and the
  // janitor can trim only the first (never the last): after the front
  // goes the retained records stay put, whatever the machine's speed.
  for (let i = 0; i < RECORDS; i++) {
    const ack = await unary.append(AppendInput.create([AppendRecord.string({ body: body(total) })]));
    check(ack.start.seqNum === total, `append at ${total}: ack start ${ack.start.seqNum}`);
    total = ack.end.seqNum;
  }
  const deadline = Date.now() + TRIM_DEADLINE_MS;
  for (;;) {
    // One read (up to 1 MiB) shows whether the front went; paging on
    // could straddle the trim.
    const page = await unary.read({ start: { from: { seqNum: 0 } } });
    check(page.records.length > 0, `read from 0 with tail ${total}: no records`);
    if (page.records[0].seqNum > 0) {
      trimmedAt = checkRetained(await readUnary({ seqNum: 0 }), total, "unary read from seq 0 once the front went");
      break;
    }
    checkFront(page.records, "unary read from seq 0 before the trim");
    check(Date.now() < deadline, `after ${TRIM_DEADLINE_MS} ms, a read from seq 0 still starts at 0: retention of ${RETENTION_SECS} s never trimmed`);
    await sleep(250);
  }
  console.error(`retention: front trimmed to seq ${trimmedAt} of ${total}`);
  const tail = await unary.checkTail();
  check(tail.tail.seqNum === total, `checkTail after the trim: ${tail.tail.seqNum}, want ${total}`);
});

await scenario("retention-unary-reads", async () => {
  check(trimmedAt !== undefined, "the front was never trimmed");
  const f1 = checkRetained(await readUnary({ seqNum: 0 }), total, "unary read from seq 0");
  check(f1 >= trimmedAt, `read from seq 0 starts at ${f1}, below the first retained ${trimmedAt} seen before`);
  checkRetained(await readUnary({ timestamp: 0 }), total, "unary read from timestamp 0");
  checkRetained(await readUnary({ tailOffset: total }), total, `unary read from tail offset ${total}`);
  const tail = await unary.checkTail();
  check(tail.tail.seqNum === total, `checkTail: ${tail.tail.seqNum}, want ${total}`);
});

for (const transport of ["fetch", "s2s"]) {
  await scenario(`retention-read-session/${transport}`, async () => {
    check(trimmedAt !== undefined, "the front was never trimmed");
    const st = s2.basin(basin).stream(name, transport === "fetch" ? { forceTransport: "fetch" } : {});
    // Bounded by count and without wait, the session ends at the tail.
    const session = await st.readSession({ start: { from: { seqNum: 0 } }, stop: { limits: { count: total } } });
    const t = await st._transportPromise;
    check(t?.constructor?.name === (transport === "fetch" ? "FetchTransport" : "S2STransport"),
      `session transport ${t?.constructor?.name}`);
    const reader = session.getReader();
    const records = [];
    for (;;) {
      const r = await within(reader.read(), STEP_TIMEOUT_MS, `readSession/${transport}: record ${records.length}`);
      if (r.done) break;
      records.push(r.value);
      check(records.length <= total, `readSession/${transport}: more records than the tail ${total}`);
    }
    const first = checkRetained(records, total, `readSession/${transport} from seq 0`);
    check(first >= trimmedAt, `readSession/${transport} starts at ${first}, below the first retained ${trimmedAt} seen before`);
    const tail = await st.checkTail();
    check(tail.tail.seqNum === total, `checkTail: ${tail.tail.seqNum}, want ${total}`);
  });
}

finish();
