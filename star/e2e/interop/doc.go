// Package interop checks a star against the official S2 TypeScript SDK
// (@s2-dev/streamstore, pinned in .ci/tools). Its test builds the star
// binary, runs `star dev` on a free loopback port and runs
// testdata/conformance.mjs under Node: the conformance scenarios of the API
// design (docs/design.md §16.3) and of the S2 fidelity work (issue 16: access tokens,
// the basin default copy, deletion-pending, idempotent create, names,
// locations, metrics, encryption, paging, session compression), each
// session scenario over both SDK transports (fetch: HTTP/1.1 with SSE; the
// Node default: S2S frames over cleartext HTTP/2). Separate tests run the
// SDK against a star with low rate limits (ratelimits.mjs) and against a
// star that shuts down under it (drain.mjs), resume a read whose
// connection a relay cuts (resume.mjs: the SDK's SSE client with
// Last-Event-ID, and its readSession on both transports), and read a
// stream whose retention age the in-process janitor trims (retention.mjs,
// with short auditor and settle timers), read below a trim within a second
// of its ack (trim.mjs, default timers), create a stream by reading it
// with the SDK's streamConfig (createonread.mjs), and send an idempotent
// producer's batches twice, on one star and across a kill -9 of it
// (idempotent.mjs: one copy, identical acks).
//
// The package has no code of its own; it exists so `go test ./...` runs the
// interop suite.
package interop
