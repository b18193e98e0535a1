// Package api holds the wire types and codecs of starlog's public API, a
// compatible implementation of the data plane of S2's REST API v1 (see
// docs/api.md and docs/design.md §16).
//
// It is pure: no HTTP server, no storage, no clocks. The star's HTTP server
// and the Go SDK (shared/sdk) both build on it, so that the two sides of the
// wire cannot drift apart:
//
//   - records: one model (Record, Header) shared by append and read, with
//     JSON (s2-format raw or base64) and protobuf codecs;
//   - validation: names, batches, command records, read queries;
//   - resources: stream and basin configs (defaults, merge, reconfigure),
//     infos, list and create requests;
//   - sessions: the SSE event writer and parser, and s2s frames with
//     bounded decompression;
//   - errors: *Error carries HTTP status, code and message, the exact
//     bodies of 412 and 416, and the definite/indefinite classification.
//
// Decoders never panic on hostile input and never allocate beyond a bound
// tied to the input size or a documented limit; each has a fuzz target.
package api
