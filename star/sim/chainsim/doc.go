// Package chainsim is a deterministic, seedable simulation of the chain
// (issue 11): mint, commit, release, fence, walk, garbage probe and trim,
// by several writer incarnations, successors and the auditor, over a
// simulated object store of K buckets and a simulated metastore. It drives
// the real shared/chain, shared/settle and shared/absorb code through the
// objstore.Store and meta.Store interfaces, and its writer is star/loglet's
// step function (loglet.Core) with a driver of its own that carries out
// the Core's effects as star/loglet/run.go does (Loglet, behind the Writer
// interface); only the batches a cut takes are drawn by the sim.
//
// One run:
//
//   - A seed draws the swarm (Draw): K, W, window, streams, flights,
//     actors, fault rates, and a sub-seed per actor (chain.Seed).
//   - Inside a testing/synctest bubble every store and metastore request
//     becomes a pending call that blocks until the scheduler serves it.
//   - The scheduler loops: synctest.Wait (every actor is parked); check the
//     invariants on what the last step changed (checker); maybe inject one
//     environment event (a bucket down, hanging or slow, a damaged copy, a
//     pause, a crash, a restart, a successor, a trim); otherwise serve one
//     ready call, picked by the Chooser from the calls in their stable
//     order, with its fault (lost reply, write never landed, metastore
//     refused or reply lost); with nothing ready, let fake time pass to
//     the next timer. One event per step.
//   - After the fault phase: heal (the atlas keeps at most min(K−W, W−1)
//     buckets down, so every slot stays decidable), let the writers
//     finish (a deposed one must stop), crash them, and demand that a
//     successor's settlement returns; then the whole chain must be
//     settled, every acknowledged record covered and readable, and an
//     auditor trim must keep it so.
//
// A Chooser makes every choice: Random draws them from the seed, the
// Odometer enumerates them all (exhaustive mode, small bounds), a Tape
// records or replays them, and Shrink minimises a failing tape. A failure
// carries the seed, the swarm and the op trace; see sim_test.go for the
// flags that replay, trace and shrink one seed.
package chainsim
