// Package durable serves the Durable Streams protocol (an open HTTP
// protocol for append-only byte streams: PUT create, POST append and close,
// GET catch-up, long-poll and SSE reads, HEAD, DELETE, idempotent
// producers) from a star, on the same starlog streams the S2 API serves.
//
// A Durable Streams stream at <prefix>/<path> is the starlog stream named
// <path> in one configured basin. Everything a client can observe is kept
// durably, so any star serves it after another is killed:
//
//   - the stream's static config (content type, TTL or expiry, fork
//     origin, fork count, soft deletion) is a metastore row (rows.go);
//   - the data, the closure and the producer and Stream-Seq state are the
//     stream's records (their layout is star/durable/records): one record
//     per bytes-mode append or per JSON message, producer headers on the
//     first record of a batch, and a marker record that closes the stream
//     in the same batch as the final data.
//
// A star folds the records into the per-stream state (records.State; the
// fold's reads and cache are state.go) and keeps it in memory only as a
// cache: before deciding an append it catches up to the durable tail and
// appends with match_seq_num at that tail, so a decision is never made on
// state another star has moved past. Offsets are seq nums
// (star/durable/offsets).
//
// A fork's source may be led by another star: the handler's reads of a
// stream it may not lead (and its deletes of one) go to that star as
// peer operations (star/durable/peer), which only the stars' own requests
// reach.
//
// Subscriptions (protocol §6–7) are star/durable/subs, which this
// package imports and which never imports it back: the handler routes the
// __ds control requests to it and tells it of every write, and it sees
// the streams only through subs.Streams (subscriptions.go), served as a
// client's requests are. Offsets are star/durable/offsets, which both use.
// docs/durable-streams.md says what the protocol
// leaves to servers and what this one chose.
package durable
