// Package verify checks starlog's streams for linearizability (issue 6,
// "Verification"): clients append (with and without match_seq_num and
// fencing tokens, some batches carrying fence command records), read and
// check-tail through the stars' endpoints while a nemesis injects faults
// (today: kill -9 of a `star dev` process and a restart on the same data);
// every history is checked with porcupine against a model of a stream, and
// a final read-back confirms every acknowledged record at its seq num.
//
// The model (Model) keeps, per stream, the tail, a chained hash of the
// records in seq order, the fencing token and a persistent list of
// record hashes, enough to check any read. An append that failed
// indefinitely gets an infinite return time and may be applied at any
// point after its call or not at all. Two observations are checked more
// loosely than a strictly sequential stream would allow, because the star
// behaves so by design or by a known defect:
//
//   - A 412 reports the sequencer's view (next assignable seq, token after
//     pending fences), which counts pipelined batches not yet durable
//     (API.md §3), so it may run ahead of every acknowledged append, even
//     to batches a crash then loses. The model accepts a report at or past
//     the tail; History.CheckReports bounds it by the appends called
//     before the 412 returned.
//   - A unary read may return fewer records than are available (see
//     Stats.ShortReads); the model accepts any non-empty prefix, and
//     check-tails and 416s still catch a stale tail.
//
// The pieces are separate so that a multi-star cluster can reuse them:
// Star runs one process, Cluster holds several, Fault and Nemesis inject
// faults, Workload drives the clients into a History, ReadBack and
// VerifyAcks do the final read-back, Check runs porcupine.
package verify
