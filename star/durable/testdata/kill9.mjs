// The official TypeScript client (@durable-streams/client, pinned in
// .ci/tools) against a star that the Go test kills with SIGKILL and starts
// again mid-run (kill9_test.go). An IdempotentProducer appends DS_MESSAGES
// JSON messages one at a time, printing "ACK i" once each is acknowledged;
// a long-poll tail reads from the start the whole time. A request cut off
// by the kill is sent again, unchanged (same producer id, epoch and seq),
// until the star is back; the tail's own backoff resumes it from its last
// offset. At the end the script reads the stream once more from the start
// and prints one RESULT line: the tail and the re-read must each hold every
// message exactly once, in order.
import { join } from "node:path"
import { pathToFileURL } from "node:url"

const tools = process.env.STARLOG_NODE_TOOLS
const { DurableStream, IdempotentProducer } = await import(
  pathToFileURL(join(tools, "@durable-streams", "client", "dist", "index.js")).href
)
const url = process.env.DS_STREAM_URL
const total = Number(process.env.DS_MESSAGES)
const deadlineMs = Number(process.env.DS_DEADLINE_MS ?? 120000)
const started = Date.now()
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// retryingFetch resends a request whose connection failed (the star was
// killed or is restarting), bounded by the run's deadline. HTTP answers
// pass through: the producer handles them.
async function retryingFetch(input, init) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(input, init)
    } catch (e) {
      if (Date.now() - started > deadlineMs) throw e
      if (attempt % 10 === 0) console.log(`RETRY ${init?.method ?? "GET"} after ${e.cause?.code ?? e.message}`)
      await sleep(100)
    }
  }
}

const backoffOptions = { initialDelay: 100, maxDelay: 500, multiplier: 1.5, maxRetries: Infinity }
const ds = await DurableStream.create({ url, contentType: "application/json", backoffOptions })

const tailed = []
let tailOffset = ""
const res = await ds.stream({ live: "long-poll", json: true, backoffOptions })
const tailDone = new Promise((resolve) => {
  res.subscribeJson(async (batch) => {
    for (const it of batch.items) tailed.push(it.i)
    tailOffset = batch.offset
    if (tailed.length >= total) resolve()
  })
})

let producerError = null
const producer = new IdempotentProducer(ds, "kill9-producer", {
  epoch: 0, lingerMs: 0, maxInFlight: 1, fetch: retryingFetch,
  onError: (e) => { producerError = e },
})
for (let i = 0; i < total; i++) {
  producer.append(JSON.stringify({ i }))
  await producer.flush()
  if (producerError) {
    console.log(`RESULT fail producer: ${producerError.message}`)
    process.exit(1)
  }
  console.log(`ACK ${i}`)
}

const timeout = sleep(Math.max(1000, deadlineMs - (Date.now() - started))).then(() => "timeout")
if ((await Promise.race([tailDone, timeout])) === "timeout") {
  console.log(`RESULT fail tail saw ${tailed.length} of ${total} messages by the deadline`)
  process.exit(1)
}
res.cancel()

const reread = await (await ds.stream({ live: false, json: true })).json()
const check = (name, got) => {
  if (got.length !== total) return `${name} holds ${got.length} messages, want ${total}`
  for (let i = 0; i < total; i++) if (got[i] !== i) return `${name}[${i}] is ${got[i]}`
  return null
}
const bad = check("tail", tailed) ?? check("re-read", reread.map((m) => m.i))
if (bad) {
  console.log(`RESULT fail ${bad}`)
  process.exit(1)
}
console.log(`RESULT ok ${total} messages acknowledged, tailed and re-read once each, in order; tail at ${tailOffset}`)
process.exit(0) // the deadline timer and keep-alive sockets would hold the loop open
