// Package producer decides the idempotent producers of the S2 face
// (docs/design.md §16.4): for each batch marked with a producer id, epoch
// and seq (shared/api's starlog-producer headers), whether it is the
// producer's next batch (apply), a retry of one already applied (answer
// its original ack), or a gap or a stale epoch (refuse).
//
// A Table is one stream's producers. It is pure: no goroutines, no I/O,
// the clock passed in. The leader keeps one beside the stream's sequencer
// (star/facade) and consults it under the same lock, so pipelined batches
// are decided in their order. A star that opens the stream rebuilds the
// table from a checkpoint and the records after it (Fold), which yields
// the table the previous leader had, except that a batch's end is not in
// the records: a retry of a rebuilt batch gets it from the retry's own
// record count (a retry carries the same records).
package producer
