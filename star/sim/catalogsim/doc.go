// Package catalogsim is a deterministic (as far as star/node allows, see
// below), seedable simulation of the resource catalog (issue 26): the
// rows that say which stream id a basin and stream name mean, the caches
// stars keep of them, leases, deletes and re-creates under the same
// names, and the releases (handoff, leave, drain, close) that move
// streams between stars. It drives the real star/node code: two or three
// stars (node.Open, with the shared in-memory object store of
// shared/objstore/mem behind a per-process gate, and a simulated
// meta.Store) and API clients that create, append to, read and delete
// basins basin-b0, basin-b1 and streams s0, s1 through any star. No
// product package may import it (.ci/layers.sh).
//
// One run:
//
//   - A seed draws the swarm (Draw): stars, clients and their sub-seeds,
//     the deletion-pending window, the idle release, fault rates and the
//     environment events on the menu.
//   - Inside a testing/synctest bubble every metastore call of every star
//     becomes a pending call (labelled with the client whose request made
//     it, u1@a2, or the incarnation itself, a2) that blocks until the
//     scheduler serves it. Clients draw their operations from their own
//     seeds; a *NotLeaderError is forwarded one hop to the named leader
//     with node.Forwarded, stream deletes go to node.LeaderOf's leader, as
//     star/server does.
//   - The scheduler loops: wait until every goroutine is parked (settle:
//     synctest.Wait, or the goroutine dump when a goroutine waits for a
//     lock whose holder waits for a call: star/node opens a stream under
//     its slot lock); take the goroutines' reports in source order; check
//     the invariants on what the step changed; maybe inject one
//     environment event (crash an incarnation, cut a star off from the
//     metastore, a handoff, a leave, a drain, a restart while the old
//     incarnation is cut off, the delivery of a held reply); otherwise
//     serve one pending call, picked by the Chooser, with its fault
//     (refused, reply lost after the write landed, reply held back and
//     delivered later); with nothing pending, let fake time pass. A
//     supervisor restarts a crashed or closed star after 3 s.
//   - After FaultSteps steps or FaultTime of fake time the faults end,
//     held replies are delivered, partitions heal and the clients stop;
//     the run ends when everything is quiet.
//
// The invariants (check.go), after every step, from the sim's own record
// of the clients' operations and the metastore's bytes:
//
//   - ack-named: an acknowledged record's stream id stays under its name
//     until a delete of the name or its basin ran since the id took it
//     (finds defect 1, a stale basin cache overwriting a live stream);
//   - seq-unique: no two acknowledgements cover one seq num of a stream
//     id with different records (defect 8's shape: two stars sequencing
//     the same seq nums);
//   - ack-into-deleted: no append that started after a delete of its name
//     or basin answered is acknowledged into an id that delete tombstoned
//     once the name holds another id, nor past the deletion-pending window
//     by a star connected to the metastore since (docs/write-path.md,
//     "Catalog invariants", items 3 and 4; found defect 2, a basin delete
//     that never reached the leaders);
//   - read-matches-ack: a read returns each acknowledged record of the id
//     it read at its seq num, and one that reached the tail holds every
//     record acknowledged before it started;
//   - refs-disjoint: a stream's catalog rows (refs) never overlap;
//   - no-panic: no goroutine of the run panics.
//
// Defect 8 (a request that judged the lease before a release reopens
// the stream after it) is found through node.Deps.Hooks.BeforeOpen
// (hooks.go): a request that reaches the step between its lease judgment
// and its open waits there as a pending call (hook.open, labelled like
// its metastore calls), which the scheduler may park (Swarm.PPark) and
// keep parked while fake time passes (the request holds no slot lock
// there), up to maxHold. While a parked request waits beside an open of
// its stream by another request of its incarnation (held.beside), the
// scheduler draws a release (handoff, leave, drain) ten times as often,
// of that incarnation, and a handoff of that stream to a peer. One swarm
// in four works busily on one stream nobody deletes. With the fix's
// checks reverted (the hook kept), seed 5 breaks seq-unique
// (TestCatalogDefects, release-reopens).
//
// The auditor (audit.go, half the swarms: Swarm.Audit): two settle runs
// (plan.Plan and settle.Settle every second, without the era's claim,
// so both may work on one era as a stall past the claim's TTL allows)
// whose read of a stream's rows is held with probability Swarm.PStall
// (a paused process, between its read and its commit, for up to maxHold
// of fake time), and a janitor (auditjob.Retention, settle.ReclaimStreams,
// settle.Reclaim every second), over the simulated metastore (calls
// labelled s1, s2, j) and the shared object store, with a settlement
// policy that ripens within a second and caps objects at 2 KiB. After the
// clients stop, the settle runs stop and the janitor runs until a pass
// leaves no id that is no longer under its name with a ref row or a
// registration for reclamation (reclaimed, checked at reclaimFor).
//
// Defect 3 (a stalled settler extends a tail another settler already
// followed) is found in its own world (settleWorld: a busy one-stream
// swarm with the auditor, settle runs stalling after half their reads of
// the rows, no other fault; -catalogsim.narrow=settle). With the seal (shared/settle
// seal) skipped on a scratch branch, that narrowed world broke
// refs-disjoint in seeds 2, 3, 5 and 7 of 1–8 (at 20,000 fault steps;
// seeds 2 and 5 within 3,000): in seed 2, s1 extends T = [59,94) and
// reads the rows again, stalled 5 s; s2 decides not to extend T and
// commits N at 94; the janitor deletes that decision; s1 resumes,
// decides afresh, and its CAS on T's row succeeds: catalog rows [59,108)
// and [94,121) overlap (TestCatalogDefects,
// stalled-settler-extends-followed-tail). The randomized run has not
// found it: seeds 1–40 (and 1–30 under a 2 s read grace and 15 s stalls)
// kept refs-disjoint; drawing settleWorld for one swarm in eight found
// it in none of the eight such seeds among 1–80 and made the 40 s budget
// run 15 seeds in 49.6 s (its busy seeds run long), so Draw does not.
//
// Flags (go test ./star/sim/catalogsim -args …):
//
//	-catalogsim.budget=20s   wall time TestCatalogSeeds spends on seeds (the runs
//	                         in flight at its end are cut short: Result.Cut)
//	-catalogsim.seeds=N      run exactly N seeds instead
//	-catalogsim.first=N      the first seed
//	-catalogsim.seed=N       replay one seed (prints its swarm and figures)
//	-catalogsim.trace        keep and print the whole trace
//	-catalogsim.logs         the stars log to stderr
//	-catalogsim.list         list every failing seed
//	-catalogsim.goon=a,b     record breaches of these invariants and run on
//	                         ("none": stop at every breach)
//	-catalogsim.narrow=release   narrow every swarm to defect 8's world
//	-catalogsim.narrow=settle    … or to defect 3's (settleWorld)
//	-catalogsim.noidle       turn the idle release off (see below)
//	-catalogsim.shrink [-catalogsim.save=NAME]   with -catalogsim.seed or
//	                         TestCatalogDefects: shrink the failing run's
//	                         tape (Shrink) and keep it in testdata/NAME.tape
//	-catalogsim.defects      run TestCatalogDefects while fixedDefects is
//	                         false: each case must break its invariant
//
// A failure prints the seed, the swarm, the trace and the command that
// replays it. The choices are chainsim's Chooser, Tape and ParseTape, so
// a run records and replays as a tape and Shrink zeroes what the failure
// does not need.
//
// Known defects: while fixedDefects (defects_test.go) is false, the
// randomized run records breaches of the invariants defects 1, 2 and 8
// break (knownInvariants) and goes on, and TestCatalogDefects skips its
// cases with a message naming the defect; flip it once the fixes merge.
//
// Determinism: star/node draws basin and stream ids through node.Deps.NewID
// (a counter here) and its clock is the bubble's; the balancer is off (its
// rounds draw jitter from the global generator); a settle run works on one
// stream at a time (two workers race for the streams). Made exact for
// what TestCatalogDeterminism runs (in make test: 3 seeds of at most 800
// fault steps, twice each; it passed five runs in a row, and seeds 1–16
// all replayed under -catalogsim.seeds=16): a close a crash cuts short reports only that and
// schedules no restart (the crash did), a leave, drain or exit of an
// incarnation already leaving is not started (two closes of one node
// ended in the runtime's order), and a stall or an early held reply is
// judged only when the bubble stays parked on a lock through 50 yields (a
// waiter being woken shows as waiting for a moment). What may still vary
// in longer runs: goroutines woken at one fake instant racing for a lock
// (the winner is the runtime's); the idle release ranging over a map of
// led streams (star/node/hygiene.go releaseIdle, off in
// TestCatalogDeterminism); the chain's nonces (crypto/rand, values only).
// A run can also stall: a goroutine waiting for a lock whose holder waits
// for fake time to pass (synctest counts a lock wait as running, so no
// time passes); the run then ends early, reported as stalled, without a
// verdict on the rest.
package catalogsim
