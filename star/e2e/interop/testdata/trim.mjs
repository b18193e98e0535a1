// The official S2 TypeScript SDK (@s2-dev/streamstore, pinned in .ci/tools)
// against a trim command on a star with default timers (issue 29 item 2):
// nothing settles within the scenario, so what it sees of the trim is the
// read path's alone. Ten records, then AppendRecord.trim(4): within one
// second of the trim's acknowledgement a read from seq 0 (unary, and a
// readSession on each transport), from a timestamp of 0 and from a tail
// offset of the whole stream starts at seq 4 with no error; every record
// from there to the tail reads back; check-tail is unaffected; a later
// trim to a lower point changes nothing.
//
// Environment and output as conformance.mjs.

import { check, finish, loadSDK, scenario, within } from "./harness.mjs";

const SHOW_WITHIN_MS = 1_000; // the promise: a trim shows within a second
const STEP_TIMEOUT_MS = 15_000;

const sdk = await loadSDK();
const { S2, AppendInput, AppendRecord } = sdk;
process.on("unhandledRejection", (e) => console.error(`unhandled rejection: ${e?.stack ?? e}`));

const s2 = new S2({
  accessToken: process.env.S2_ACCESS_TOKEN,
  endpoints: { account: process.env.S2_ACCOUNT_ENDPOINT, basin: process.env.S2_BASIN_ENDPOINT },
  retry: { maxAttempts: 1 },
});
const runId = Math.random().toString(36).slice(2, 10).padEnd(8, "0");
const basin = `trim-${runId}`;
await s2.basins.create({ basin });

const body = (i) => `rec-${i}`;

// checkFrom: records start at first and run contiguously to the tail, each
// with its body (the trim command record reads back like any record).
function checkFrom(records, first, tail, what) {
  check(records.length > 0, `${what}: no records`);
  check(records[0].seqNum === first, `${what}: first seq ${records[0].seqNum}, want ${first} (the trim point)`);
  records.forEach((r, i) => {
    check(r.seqNum === first + i, `${what}: record ${i} has seq ${r.seqNum}, want ${first + i}`);
    if (r.seqNum < 10) check(r.body === body(r.seqNum), `${what}: seq ${r.seqNum} body ${JSON.stringify(r.body)}`);
  });
  check(records.at(-1).seqNum === tail - 1, `${what}: last seq ${records.at(-1).seqNum}, want ${tail - 1}`);
}

async function session(st, transport, tail) {
  const s = await st.readSession({ start: { from: { seqNum: 0 } }, stop: { limits: { count: tail } } });
  const t = await st._transportPromise;
  check(t?.constructor?.name === (transport === "fetch" ? "FetchTransport" : "S2STransport"), `session transport ${t?.constructor?.name}`);
  const reader = s.getReader();
  const out = [];
  for (;;) {
    const r = await within(reader.read(), STEP_TIMEOUT_MS, `readSession/${transport}: record ${out.length}`);
    if (r.done) break;
    out.push(r.value);
    check(out.length <= tail, `readSession/${transport}: more records than the tail ${tail}`);
  }
  return out;
}

for (const transport of ["fetch", "s2s"]) {
  await scenario(`trim-shows-at-once/${transport}`, async () => {
    const name = `trimmed-${transport}`;
    await s2.basin(basin).streams.create({ stream: name });
    const st = s2.basin(basin).stream(name, transport === "fetch" ? { forceTransport: "fetch" } : {});
    const ack = await st.append(AppendInput.create(Array.from({ length: 10 }, (_, i) => AppendRecord.string({ body: body(i) }))));
    check(ack.end.seqNum === 10, `append of ten: ack end ${ack.end.seqNum}`);
    const trim = await st.append(AppendInput.create([AppendRecord.trim(4)]));
    const acked = Date.now();
    const tail = trim.end.seqNum;
    check(tail === 11, `trim command ack end ${tail}, want 11`);

    const first = await st.read({ start: { from: { seqNum: 0 } } });
    const took = Date.now() - acked;
    checkFrom(first.records, 4, tail, "unary read from seq 0 right after the trim's ack");
    check(took <= SHOW_WITHIN_MS, `the trim showed ${took} ms after its ack, want within ${SHOW_WITHIN_MS} ms`);
    checkFrom((await st.read({ start: { from: { timestamp: 0 } } })).records, 4, tail, "unary read from timestamp 0");
    checkFrom((await st.read({ start: { from: { tailOffset: tail } } })).records, 4, tail, `unary read from tail offset ${tail}`);
    checkFrom(await session(st, transport, tail), 4, tail, `readSession/${transport} from seq 0`);
    const ct = await st.checkTail();
    check(ct.tail.seqNum === tail, `checkTail after the trim: ${ct.tail.seqNum}, want ${tail}`);

    // A trim point never moves back.
    const back = await st.append(AppendInput.create([AppendRecord.trim(1)]));
    checkFrom((await st.read({ start: { from: { seqNum: 0 } } })).records, 4, back.end.seqNum, "read from seq 0 after trim(1)");
  });
}

finish();
