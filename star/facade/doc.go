// Package facade is the sequencer at the front of every stream a star leads.
//
// For each append batch it validates the records, checks the fencing token
// and match_seq_num, assigns dense sequence numbers and stamps final
// timestamps, following the S2 append semantics (docs/design.md §16.2). It is pure: no
// goroutines, no I/O, and the clock is passed in, so the same inputs always
// give the same outputs.
//
// A Stream tracks two frontiers. Next is the next assignable sequence number,
// counting batches that were sequenced but are not yet durable (pending);
// match_seq_num and the fencing token are checked against that pending view,
// because pipelined appends must see their predecessors. Tail is the durable
// frontier, advanced by Acked once a batch has been released; it is what
// check-tail and a 416 report.
//
// Sequencing cannot be undone, so a caller that may still fail to enqueue a
// batch (pool budget, a cancelled client) must secure room first (see
// pool.Reserve) and sequence only once the batch is certain to go out.
package facade
