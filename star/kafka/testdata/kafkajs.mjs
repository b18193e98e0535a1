// KafkaJS (pinned in .ci/tools) against a star's Kafka face: produce,
// consume from the beginning, a group of two that rebalances when one
// leaves, commit and resume. Run by TestKafkaJS (kafkajs_test.go).
//
// Environment: KAFKA_BROKER (host:port of an open star's Kafka listener)
// and STARLOG_NODE_TOOLS (the node_modules folder holding kafkajs).
//
// Output: one line per scenario on stdout, `PASS <name>` or
// `FAIL <name>: <reason>`, then `N passed, M failed`; exit status 1 on any
// failure.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const KAFKAJS_VERSION = "2.2.4";
const SCENARIO_TIMEOUT_MS = 30_000;

const dir = path.join(process.env.STARLOG_NODE_TOOLS ?? "", "kafkajs");
const pkg = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8"));
if (pkg.version !== KAFKAJS_VERSION) {
  throw new Error(`kafkajs is ${pkg.version} under ${dir}, want ${KAFKAJS_VERSION}`);
}
const { Kafka, logLevel } = createRequire(import.meta.url)(dir);

const kafka = new Kafka({
  clientId: "starlog-kafkajs",
  brokers: [process.env.KAFKA_BROKER],
  logLevel: logLevel.WARN,
  retry: { retries: 8, initialRetryTime: 100 },
});

// waitFor polls cond every 20 ms until it holds or the bound passes.
async function waitFor(what, cond, ms = 20_000) {
  const until = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// consumer starts a group member of topic that records what it reads
// (partition → offsets) and its assignment after each join.
async function consumer(groupId, topic, opts = {}) {
  const c = kafka.consumer({ groupId, heartbeatInterval: 200, sessionTimeout: 10_000, rebalanceTimeout: 10_000, maxWaitTimeInMs: 200 });
  const m = { c, seen: {}, assigned: [] };
  c.on(c.events.GROUP_JOIN, (e) => {
    m.assigned = e.payload.memberAssignment[topic] ?? [];
  });
  await c.connect();
  await c.subscribe({ topic, fromBeginning: true });
  await c.run({
    autoCommit: opts.autoCommit ?? false,
    eachMessage: async ({ partition, message }) => {
      (m.seen[partition] ??= []).push(Number(message.offset));
    },
  });
  return m;
}

const next = (m, p) => {
  const s = m.seen[p] ?? [];
  return s.length === 0 ? 0 : s[s.length - 1] + 1;
};

const admin = kafka.admin();
const producer = kafka.producer();

async function produce(topic, partitions, n, tag) {
  const messages = [];
  for (let p = 0; p < partitions; p++) {
    for (let i = 0; i < n; i++) messages.push({ partition: p, key: `k${i}`, value: `${tag}-p${p}-${i}` });
  }
  await producer.send({ topic, acks: -1, messages });
}

const scenarios = [
  ["produce and consume from the beginning", async () => {
    await admin.createTopics({ topics: [{ topic: "js-begin", numPartitions: 2 }], waitForLeaders: false });
    await produce("js-begin", 2, 5, "a");
    const m = await consumer("js-begin-group", "js-begin");
    try {
      await waitFor("10 records read", () => next(m, 0) === 5 && next(m, 1) === 5);
      for (const p of [0, 1]) {
        if (JSON.stringify(m.seen[p]) !== "[0,1,2,3,4]") throw new Error(`partition ${p} read ${m.seen[p]}`);
      }
    } finally {
      await m.c.disconnect();
    }
  }],
  ["a group of two rebalances when one leaves", async () => {
    await admin.createTopics({ topics: [{ topic: "js-pair", numPartitions: 2 }], waitForLeaders: false });
    await produce("js-pair", 2, 3, "b");
    const a = await consumer("js-pair-group", "js-pair");
    const b = await consumer("js-pair-group", "js-pair");
    try {
      await waitFor("a and b hold one partition each", () => a.assigned.length === 1 && b.assigned.length === 1);
      const d = await admin.describeGroups(["js-pair-group"]);
      const g = d.groups[0];
      if (g.state !== "Stable" || g.members.length !== 2) throw new Error(`describeGroups: ${g.state}, ${g.members.length} members`);
      await a.c.disconnect(); // LeaveGroup
      await waitFor("b holds both partitions", () => b.assigned.length === 2);
    } finally {
      await b.c.disconnect();
    }
  }],
  ["commit and resume", async () => {
    await admin.createTopics({ topics: [{ topic: "js-resume", numPartitions: 2 }], waitForLeaders: false });
    await produce("js-resume", 2, 5, "c");
    const m = await consumer("js-resume-group", "js-resume");
    try {
      await waitFor("10 records read", () => next(m, 0) === 5 && next(m, 1) === 5);
      await m.c.commitOffsets([0, 1].map((p) => ({ topic: "js-resume", partition: p, offset: "5" })));
    } finally {
      await m.c.disconnect();
    }
    const got = await admin.fetchOffsets({ groupId: "js-resume-group", topics: ["js-resume"] });
    const offs = got[0].partitions.map((p) => `${p.partition}:${p.offset}`).sort().join(",");
    if (offs !== "0:5,1:5") throw new Error(`fetchOffsets: ${offs}`);
    await produce("js-resume", 2, 2, "d");
    const r = await consumer("js-resume-group", "js-resume");
    try {
      await waitFor("the 2 new records of each partition read", () => next(r, 0) === 7 && next(r, 1) === 7);
      for (const p of [0, 1]) {
        if (JSON.stringify(r.seen[p]) !== "[5,6]") throw new Error(`partition ${p} resumed with ${r.seen[p]}, want [5,6]`);
      }
    } finally {
      await r.c.disconnect();
    }
  }],
];

let passed = 0, failed = 0;
await admin.connect();
await producer.connect();
for (const [name, run] of scenarios) {
  let timer;
  try {
    await Promise.race([run(), new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timed out after ${SCENARIO_TIMEOUT_MS} ms`)), SCENARIO_TIMEOUT_MS); })]);
    console.log(`PASS ${name}`);
    passed++;
  } catch (e) {
    console.log(`FAIL ${name}: ${e?.message ?? e}`);
    failed++;
  } finally {
    clearTimeout(timer);
  }
}
await producer.disconnect();
await admin.disconnect();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
