// Package sdk is the Go client of starlog's public API, which is S2's REST
// API v1 data plane: it works against a star and against any other
// S2-compatible server. It builds only on shared/api, so the client and the
// server share one set of wire types and codecs.
//
// # Layout
//
// A Client holds the endpoints, the token and two HTTP clients: one for
// unary calls (HTTP/1.1) and one for sessions (HTTP/2; cleartext "h2c"
// with prior knowledge for http:// endpoints, as S2's SDKs do in
// self-hosted mode). Client manages basins; Client.Basin(name) returns a
// Basin that manages streams; Basin.Stream(name) returns a Stream with the
// data-plane calls:
//
//   - Append, Read, CheckTail: unary calls;
//   - AppendSession: an S2S append session with pipelined batches, a future
//     per batch, acks checked in order, and backpressure by unacked bytes;
//   - NewProducer: records in, batches out (by linger, size and count), a
//     future per record;
//   - ReadSession: an S2S read session that follows live, checks
//     heartbeats and resumes after a reconnect at the last seq num + 1.
//
// Client also manages access tokens (IssueAccessToken, ListAccessTokens,
// AllAccessTokens, RevokeAccessToken), with the types of S2's spec.
//
// # Encoding
//
// Unary appends and reads use protobuf (Content-Type and Accept
// application/protobuf) by default: it carries arbitrary bytes exactly and
// is the smallest and cheapest encoding on both sides. Config.Encoding
// selects JSON instead, for servers or proxies that only speak JSON; the
// SDK then sends s2-format: base64 so that no byte is lost. Management
// calls are JSON (the only encoding the API has for them). Sessions are
// always S2S frames of s2.v1 protobuf messages.
//
// The basin of every stream call is named by the s2-basin header (s2-lite's
// self-hosted addressing). A basin endpoint containing "{basin}" is
// instead expanded with the basin name, as for S2's cloud, and the header
// is not sent.
//
// # Failures: definite and indefinite
//
// Every error is either definite (the request surely had no effect) or
// indefinite (it may or may not have been applied); IsDefinite tells them
// apart. API errors follow api.Error.Definite; a failure to connect is
// definite; any other transport failure, a timeout or a cancellation is
// indefinite.
//
// This matters for appends only. Retrying an append after an indefinite
// failure can write its records twice, unless the append carries
// match_seq_num: the retry of an append that was in fact applied then fails
// with 412 (seq_num_mismatch) instead of duplicating. RetryPolicy makes the
// choice explicit:
//
//   - reads, check-tail and management calls are retried on every
//     retryable failure (they are idempotent; creates carry an
//     s2-request-token);
//   - an append is retried after a definite retryable failure (429, 409
//     transaction_conflict, 502 hot_server, a refused connection), and after
//     an indefinite one only if it carries match_seq_num, or a producer
//     mark (the starlog-producer headers: a star answers the retry of an
//     applied batch with its original ack; IdempotentAppender sets them),
//     or the policy's AppendRetry is AppendRetryAll (at-least-once:
//     duplicates accepted).
//
// A 412 received by such a retry is returned wrapped with the indefinite
// failure that preceded it: the earlier attempt may have been applied.
//
// A 429 rate_limited carries the server's wait (retry-after-ms, else
// Retry-After, in api.Error.RetryAfter); the next attempt waits at least
// that long (capped by RetryPolicy.MaxRetryAfter). The attempts stay
// bounded by MaxAttempts, and a wait that would outlast the context's
// deadline is not taken: the 429 is returned at once. A 429 is definite,
// so a rate-limited append is retried under AppendRetrySafe.
//
// Sessions are never retried inside an append session (a batch in flight
// when the session breaks fails with an indefinite error, later ones with
// a definite one); read sessions reconnect on their own (reads are
// idempotent), resuming after the last record delivered.
package sdk
