// Package verify checks starlog's streams for linearizability (issue 6,
// "Verification"): clients append (with and without match_seq_num and
// fencing tokens, some batches carrying fence command records), read and
// check-tail through different stars of a cluster (N `star serve`
// processes on one SQLite metastore and one object directory; a star that
// does not lead a stream forwards to its leader) while a nemesis injects
// faults: kill -9 of a star and a restart on the same data, a handoff of a
// stream to another star under load, and slow or down buckets and
// metastore through the stars' dev fault controls (`star serve
// --dev-fault-listen`), including a metastore partition of one star past
// dead-after. Every history is checked with porcupine against a model of a
// stream, and a final read-back confirms every acknowledged record at its
// seq num and that no seq num was acknowledged twice.
//
// The model (Model) keeps, per stream, the tail, a chained hash of the
// records in seq order, the fencing token and a persistent list of
// record hashes, enough to check any read. An append that failed
// indefinitely gets an infinite return time and may be applied at any
// point after its call or not at all; once a read returned a record only
// it carries, it is checked as applied (OutObserved) before that read
// returned. Two observations are checked more loosely than a strictly
// sequential stream would allow, because the star behaves so by design or
// by a known defect:
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
// The pieces are separate: Star runs one process, Cluster holds several
// (and plays the supervisor that restarts an unhealthy star), Fault and
// Nemesis inject faults (KillRestart, Handoff, StoreFault), Workload drives
// the clients into a History, ReadBack, VerifyAcks and DuplicateAcks do
// the final read-back, Check runs porcupine, HandoffBlips measures what
// the clients saw around a handoff.
package verify
