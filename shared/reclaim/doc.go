// Package reclaim holds the auditor's deleters (docs/settle.md,
// "Reclamation"; docs/design.md §11): the trim-check that retires a
// chain's transit slots and, once its star is decommissioned, its chain
// garbage (trim.go, collect.go); the retention and trim of a stream's
// catalog rows (retain.go); the reclaim pass that deletes the settled
// objects no row names any more (reclaim.go); and the reclamation of
// deleted streams (deleted.go). shared/settle settles; this package
// deletes what settling and the streams' policies leave behind, rows
// before objects and behind the read grace. It runs on settle.Stores and
// counts into settle.Metrics, so a runtime wires one set of stores.
package reclaim
