// The official S2 TypeScript SDK (@s2-dev/streamstore, pinned in .ci/tools)
// against a star's per-stream append limits, set low by the Go test:
// --append-stream-mib-per-sec 0.0625 (64 KiB/s, burst 1 MiB) and
// --append-stream-batches-per-sec 4.
//
// Environment and output as conformance.mjs: S2_ACCOUNT_ENDPOINT,
// S2_BASIN_ENDPOINT, S2_ACCESS_TOKEN, STARLOG_NODE_TOOLS; one `PASS <name>`
// or `FAIL <name>: <reason>` line per scenario, then `N passed, M failed`.
// Retries are off (maxAttempts: 1), so the SDK shows the star's answer.

import { check, finish, loadSDK, scenario } from "./harness.mjs";

const sdk = await loadSDK();
const { S2, AppendInput, AppendRecord, S2Error } = sdk;
const s2 = new S2({
  accessToken: process.env.S2_ACCESS_TOKEN,
  endpoints: { account: process.env.S2_ACCOUNT_ENDPOINT, basin: process.env.S2_BASIN_ENDPOINT },
  retry: { maxAttempts: 1 },
});
const runId = Math.random().toString(36).slice(2, 10).padEnd(8, "0");
const basin = `ratelimit-${runId}`;
await s2.basins.create({ basin, config: { createStreamOnAppend: true } });

// A unary append past the stream's throughput: the SDK surfaces S2's 429
// rate_limited, and the stream has only the first batch.
await scenario("unary-429", async () => {
  const stream = s2.basin(basin).stream("unary", { forceTransport: "fetch" });
  const big = () => AppendInput.create([AppendRecord.string({ body: "x".repeat(600 << 10) })]);
  await stream.append(big());
  let err;
  try {
    await stream.append(big());
  } catch (e) {
    err = e;
  }
  check(err instanceof S2Error && err.status === 429 && err.code === "rate_limited",
    `second 600 KiB append: got ${err ? `${err.constructor?.name} ${err.status} ${err.code} ${err.message}` : "success"}, want 429 rate_limited`);
  const tail = await stream.checkTail();
  check(tail.tail.seqNum === 1, `tail ${tail.tail.seqNum}, want 1`);
});

// An S2S append session past the batch rate is throttled, not failed:
// every submit is acknowledged in order, at about the limit's pace.
await scenario("session-throttled", async () => {
  const stream = s2.basin(basin).stream("session");
  const session = await stream.appendSession();
  const start = Date.now();
  const acks = [];
  for (let i = 0; i < 12; i++) {
    const t = await session.submit(AppendInput.create([AppendRecord.string({ body: `b${i}` })]));
    acks.push(t.ack());
  }
  const got = await Promise.all(acks);
  await session.close();
  got.forEach((a, i) => check(a.start.seqNum === i, `ack ${i} at ${a.start.seqNum}`));
  const took = Date.now() - start;
  check(took >= 1500, `12 batches at 4/s (burst 4) took ${took} ms: not throttled`);
});

finish();
