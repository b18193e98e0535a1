// Package settle holds the auditor's settling after a chain's refs are
// whole (shared/settle/chainsettle restores them: fence, walk, absorb,
// probe, mark settled): group settle (what goes in each object:
// planObject) and catalog commit, the marker and epoch rules the plan
// (shared/settle/plan: read each chain, then PlanOf, which is pure)
// reads, and the quarantine of streams that keep failing (the
// operator's commands on them are shared/settle/quarantine's). The fetch
// cache and an object's upload are shared/settle/assemble's. What
// settling leaves to delete (slots, superseded and trimmed objects,
// deleted streams) is shared/reclaim's, which runs on the Stores and
// Metrics defined here. Every job is a function of the stores, idempotent
// and safe to run twice at once.
package settle
