// The official S2 TypeScript SDK (@s2-dev/streamstore, pinned in .ci/tools)
// against retention by age on a star whose in-process auditor runs fast
// (the Go test starts `star dev` with short auditor, settle and read-grace
// timers). A stream with retention_policy.age of 5 s gets 1.5 MB of
// records, two settled objects' worth, and is read from seq 0 until the
// janitor has forgotten them all (polled, not timed: retention forgets an
// idle stream, and the emptied stream keeps its tail); three records are
// appended after them and then, as
// docs/api.md "Trimmed records" says, a read from seq 0 (unary, and a
// readSession on each transport), from a timestamp of 0 and from a tail
// offset below the first retained record starts at the first retained
// record with no error, every record from there to the tail reads back,
// and check-tail is unaffected.
//
// Environment and output as conformance.mjs.

import { setTimeout as sleep } from "node:timers/promises";
import { check, finish, loadSDK, scenario, within } from "./harness.mjs";

const RETENTION_SECS = 5; // long enough for the reads after the new appends
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

let total = 0;
let forgotten; // the tail once every record first appended had aged out
let trimmedAt; // the first seq of a read from 0 once the front went

await scenario("retention-forgets", async () => {
  const cfg = await s2.basin(basin).streams.getConfig({ stream: name });
  check(cfg.retentionPolicy?.ageSecs === RETENTION_SECS, `stream config retention ${JSON.stringify(cfg.retentionPolicy)}`);
  for (let i = 0; i < RECORDS; i++) {
    const ack = await unary.append(AppendInput.create([AppendRecord.string({ body: body(total) })]));
    check(ack.start.seqNum === total, `append at ${total}: ack start ${ack.start.seqNum}`);
    total = ack.end.seqNum;
  }
  // Retention forgets an idle stream's records (docs/settle.md, "Retention
  // forgets, idle or not"): polled until a read from seq 0 finds none;
  // meanwhile every read starts at or above where the last one did and
  // runs contiguously.
  const deadline = Date.now() + TRIM_DEADLINE_MS;
  let low = 0;
  for (;;) {
    const page = await unary.read({ start: { from: { seqNum: 0 } } });
    if (page.records.length === 0) break;
    const first = page.records[0].seqNum;
    check(first >= low, `read from seq 0 starts at ${first}, below ${low} seen before`);
    low = first;
    page.records.forEach((r, i) => {
      check(r.seqNum === first + i && r.body === body(r.seqNum), `read from seq 0: record ${i} is seq ${r.seqNum} ${short(r.body)}`);
    });
    check(Date.now() < deadline, `after ${TRIM_DEADLINE_MS} ms a read from seq 0 still returns records: retention of ${RETENTION_SECS} s never forgot them`);
    await sleep(250);
  }
  forgotten = total;
  // The emptied stream keeps its tail, as S2's does.
  const tail = await unary.checkTail();
  check(tail.tail.seqNum === total, `checkTail once every record aged out: ${tail.tail.seqNum}, want ${total}`);
  const byTime = await unary.read({ start: { from: { timestamp: 0 } } });
  check(byTime.records.length === 0, `read from timestamp 0 once every record aged out: ${byTime.records.length} records`);
  console.error(`retention: all ${total} records forgotten`);
});

await scenario("retention-trims-front", async () => {
  check(forgotten !== undefined, "the records were never forgotten");
  // Records appended after the forgotten ones: a read from seq 0 starts at
  // the first of them with no error (docs/api.md "Trimmed records").
  for (let i = 0; i < 3; i++) {
    const ack = await unary.append(AppendInput.create([AppendRecord.string({ body: body(total) })]));
    check(ack.start.seqNum === total, `append at ${total}: ack start ${ack.start.seqNum}`);
    total = ack.end.seqNum;
  }
  trimmedAt = checkRetained(await readUnary({ seqNum: 0 }), total, "unary read from seq 0 after the forgotten records");
  check(trimmedAt === forgotten, `read from seq 0 starts at ${trimmedAt}, want ${forgotten}, the first record not aged out`);
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
