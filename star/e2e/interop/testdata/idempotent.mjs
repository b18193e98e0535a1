// The official S2 TypeScript SDK (@s2-dev/streamstore, unmodified) as an
// idempotent producer of starlog's S2 face: its batches carry the
// starlog-producer headers as plain record headers (docs/api.md
// "Idempotent producers"). The Go test runs this script twice against
// one data directory: PHASE=before, then a kill -9 of the star and a new
// star on the same data, then PHASE=after. ACK_FILE carries the first
// phase's acks to the second; BASIN names the basin both use.
//
// before: a batch sent twice (S2S, then fetch) gets one copy and two
// identical acks; a batch sent on an append session and again on a new
// one likewise.
// after (the star was killed -9 and restarted): both batches sent again
// get their original acks, nothing more is appended; a gap is 409
// producer_seq_gap.
// Retries are off (maxAttempts: 1), so the SDK shows the star's answers.

import { readFileSync, writeFileSync } from "node:fs";
import { check, finish, loadSDK, scenario, within } from "./harness.mjs";

const sdk = await loadSDK();
const { S2, AppendInput, AppendRecord, S2Error } = sdk;
const s2 = new S2({
  accessToken: process.env.S2_ACCESS_TOKEN,
  endpoints: { account: process.env.S2_ACCOUNT_ENDPOINT, basin: process.env.S2_BASIN_ENDPOINT },
  retry: { maxAttempts: 1 },
});
const phase = process.env.PHASE;
const basin = process.env.BASIN;
const ackFile = process.env.ACK_FILE;
const s2sStream = s2.basin(basin).stream("s");
const fetchStream = s2.basin(basin).stream("s", { forceTransport: "fetch" });

// batch is n records, the first marked as producer "ts-producer" epoch 3.
const batch = (seq, n) => AppendInput.create(Array.from({ length: n }, (_, i) => AppendRecord.string({
  body: `seq${seq}-${i}`,
  headers: i === 0 ? [["starlog-producer", "ts-producer"], ["starlog-producer-epoch", "3"], ["starlog-producer-seq", String(seq)]] : [],
})));
const pos = (p) => ({ seqNum: p.seqNum, timestamp: p.timestamp.getTime() });
const same = (a, b, what) => {
  const x = JSON.stringify([pos(a.start), pos(a.end)]);
  const y = JSON.stringify([pos(b.start), pos(b.end)]);
  check(x === y, `${what}: ack ${y}, the original ${x}`);
};
const bodies = async () => {
  const out = await fetchStream.read({ start: { from: { seqNum: 0 } }, stop: { limits: { count: 1000 } } });
  return out.records.map((r) => r.body);
};
const describe = (e) => `${e?.constructor?.name} status=${e?.status} code=${e?.code} message=${e?.message}`;

if (phase === "before") {
  await s2.basins.create({ basin, config: { createStreamOnAppend: true } });
  const acks = {};
  await scenario("retry-on-the-same-star", async () => {
    acks.b0 = await s2sStream.append(batch(0, 3));
    check(acks.b0.start.seqNum === 0 && acks.b0.end.seqNum === 3, `first ack [${acks.b0.start.seqNum}, ${acks.b0.end.seqNum})`);
    same(acks.b0, await s2sStream.append(batch(0, 3)), "retry over S2S");
    same(acks.b0, await fetchStream.append(batch(0, 3)), "retry over fetch");
    const got = await bodies();
    check(JSON.stringify(got) === JSON.stringify(["seq0-0", "seq0-1", "seq0-2"]), `read back ${JSON.stringify(got)}`);
  });
  // A retry on a new session, as after a broken one. (The SDK checks that
  // one session's acks strictly increase, so it fails a session in which a
  // retry is pipelined right behind its original: docs/api.md.)
  await scenario("retry-on-a-new-session", async () => {
    const first = await s2sStream.appendSession();
    const a1 = await within((await first.submit(batch(1, 2))).ack(), 10_000, "session ack");
    await within(first.close(), 10_000, "appendSession.close()");
    check(a1.start.seqNum === 3 && a1.end.seqNum === 5, `ack [${a1.start.seqNum}, ${a1.end.seqNum})`);
    const second = await fetchStream.appendSession();
    const a2 = await within((await second.submit(batch(1, 2))).ack(), 10_000, "the retry's ack");
    await within(second.close(), 10_000, "appendSession.close()");
    same(a1, a2, "the retry on a new session");
    acks.b1 = a1;
    const tail = (await s2sStream.checkTail()).tail.seqNum;
    check(tail === 5, `tail ${tail}, want 5`);
  });
  writeFileSync(ackFile, JSON.stringify({ b0: [pos(acks.b0.start), pos(acks.b0.end)], b1: [pos(acks.b1.start), pos(acks.b1.end)] }));
} else {
  const before = JSON.parse(readFileSync(ackFile, "utf8"));
  const sameAs = (want, a, what) => {
    const got = JSON.stringify([pos(a.start), pos(a.end)]);
    check(got === JSON.stringify(want), `${what}: ack ${got}, the original ${JSON.stringify(want)}`);
  };
  await scenario("retry-across-kill-9", async () => {
    sameAs(before.b0, await s2sStream.append(batch(0, 3)), "batch 0 after the kill -9");
    sameAs(before.b1, await fetchStream.append(batch(1, 2)), "batch 1 after the kill -9");
    const got = await bodies();
    check(JSON.stringify(got) === JSON.stringify(["seq0-0", "seq0-1", "seq0-2", "seq1-0", "seq1-1"]), `read back ${JSON.stringify(got)}: one copy of each`);
  });
  await scenario("gap-refused", async () => {
    let err;
    try { await s2sStream.append(batch(5, 1)); } catch (e) { err = e; }
    check(err instanceof S2Error && err.status === 409 && err.code === "producer_seq_gap", `a gap: ${describe(err)}`);
    const next = await s2sStream.append(batch(2, 1));
    check(next.start.seqNum === 5, `seq 2 at ${next.start.seqNum}, want 5`);
  });
}
finish();
