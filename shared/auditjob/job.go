// Package auditjob is the auditor's job set as its runtimes see it: the
// group settle and trim-check jobs of shared/settle, plus chain-settle (one
// halted epoch below its chain's mint head), the janitor that finds those,
// one strict message codec for every kind, and one Do. The Lambda adapters
// (functions/) and the in-process runner of `star dev` (star/auditor) only
// move Jobs between a trigger, a queue and Do, so the two cannot diverge.
package auditjob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
)

// KindChainSettle settles a chain's unsettled epochs up to one epoch:
// fence (adopting a recorded cut), walk, absorb, probe, mark settled. The
// epoch is below the mint head, or is the head of a star the janitor
// judged gone (Owner set).
const KindChainSettle settle.Kind = "chain-settle"

// Kinds lists every queued job kind. Each kind has its own queue (and
// Lambda function), named like the kind.
var Kinds = []settle.Kind{settle.KindSettle, settle.KindTrim, KindChainSettle}

// Job is one unit of queued auditor work. Its JSON form is settle.Job's,
// with chain-settle added as a kind; like settle.Job it names coordinates
// only, so a job run late or twice re-reads everything it acts on.
type Job struct {
	Kind  settle.Kind     `json:"kind"`
	Chain settle.ChainRef `json:"chain"`
	// Epoch: a settle job's epoch, or the epoch a chain-settle settles.
	Epoch uint64 `json:"epoch,omitempty"`
	// From and End bound a settle job's era in slots.
	From uint64 `json:"from,omitempty"`
	End  uint64 `json:"end,omitempty"`
	// Owner is set on a chain-settle of a mint head epoch: the incarnation
	// that minted it, which the janitor found dead, stopped, or closed
	// with a settle marker. The job re-checks that before it fences.
	Owner string `json:"owner,omitempty"`
}

// FromSettle wraps a settle or trim job.
func FromSettle(j settle.Job) Job {
	return Job{Kind: j.Kind, Chain: j.Chain, Epoch: j.Epoch, From: j.From, End: j.End}
}

// ChainSettle is the job settling epoch of ch, an epoch below its mint
// head.
func ChainSettle(ch settle.ChainRef, epoch uint64) Job {
	return Job{Kind: KindChainSettle, Chain: ch, Epoch: epoch}
}

// ChainSettleHead is the job settling ch up to and including its mint head
// epoch, minted by owner, whose star is gone.
func ChainSettleHead(ch settle.ChainRef, epoch uint64, owner string) Job {
	return Job{Kind: KindChainSettle, Chain: ch, Epoch: epoch, Owner: owner}
}

func (j Job) settleJob() settle.Job {
	return settle.Job{Kind: j.Kind, Chain: j.Chain, Epoch: j.Epoch, From: j.From, End: j.End}
}

func (j Job) String() string {
	if j.Kind == KindChainSettle {
		if j.Owner != "" {
			return fmt.Sprintf("chain-settle %s through head epoch %d of %s", j.Chain, j.Epoch, j.Owner)
		}
		return fmt.Sprintf("chain-settle %s epoch %d", j.Chain, j.Epoch)
	}
	return j.settleJob().String()
}

// Queue names the queue (and function) that runs the job: its kind.
func (j Job) Queue() string { return string(j.Kind) }

// Validate checks a job's fields.
func (j Job) Validate() error {
	if j.Kind != KindChainSettle {
		return j.settleJob().Validate()
	}
	if j.Chain.Star == "" || !j.Chain.Class.Valid() {
		return fmt.Errorf("auditjob: bad chain %q/%q", j.Chain.Star, j.Chain.Class)
	}
	if j.Epoch == 0 || j.From != 0 || j.End != 0 {
		return fmt.Errorf("auditjob: a chain-settle job names a chain and an epoch ≥ 1 only (epoch %d, slots [%d,%d))", j.Epoch, j.From, j.End)
	}
	if j.Owner != "" && !strings.HasPrefix(j.Owner, j.Chain.Star+":") {
		return fmt.Errorf("auditjob: chain-settle owner %q is not an incarnation of star %q", j.Owner, j.Chain.Star)
	}
	return nil
}

// Marshal encodes a job as a queue message body. The encoding is
// deterministic (fixed field order, no whitespace), so the body doubles as
// the job's identity: a job planned twice is the same message twice.
func (j Job) Marshal() []byte { return meta.Encode(j) }

// Key is the job's identity (its body), for de-duplicating queues.
func (j Job) Key() string { return string(j.Marshal()) }

// maxJobBytes bounds a message body (a job is ~150 B; SQS allows 256 KiB).
const maxJobBytes = 4 << 10

// Parse decodes and validates a queue message body. Unknown fields and
// trailing data are refused, so a message from a newer planner is never
// run half-understood; settle and trim bodies go through settle.ParseJob.
func Parse(b []byte) (Job, error) {
	if len(b) > maxJobBytes {
		return Job{}, fmt.Errorf("auditjob: job of %d bytes (max %d)", len(b), maxJobBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var j Job
	if err := dec.Decode(&j); err != nil {
		return Job{}, fmt.Errorf("auditjob: decode job: %w", err)
	}
	if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
		return Job{}, errors.New("auditjob: trailing data after job")
	}
	if j.Kind != KindChainSettle {
		sj, err := settle.ParseJob(b)
		if err != nil {
			return Job{}, err
		}
		return FromSettle(sj), nil
	}
	if err := j.Validate(); err != nil {
		return Job{}, err
	}
	return j, nil
}

// Sender enqueues jobs, each to its kind's queue.
type Sender interface {
	Send(ctx context.Context, jobs []Job) error
}

// Plan is plan.Plan as Jobs: one settle job per era of ripe markers and
// one trim-check per chain that has slots to retire. It also sets the
// quarantined-streams gauge.
func Plan(ctx context.Context, st *settle.Stores, now time.Time) ([]Job, error) {
	sjs, err := plan.Plan(ctx, st, now)
	if err != nil {
		return nil, err
	}
	// The quarantine gauge rides the plan's schedule (its alarm reads it).
	if err := st.PublishQuarantine(ctx); err != nil {
		st.Log().Warn("auditjob: count quarantined streams", "err", err)
	}
	jobs := make([]Job, len(sjs))
	for i, sj := range sjs {
		jobs[i] = FromSettle(sj)
	}
	return jobs, nil
}

// Do runs one job of any kind: the whole of a queue consumer's work.
func Do(ctx context.Context, st *settle.Stores, j Job) error {
	switch j.Kind {
	case settle.KindSettle:
		return settle.Do(ctx, st, j.settleJob())
	case settle.KindTrim:
		_, err := reclaim.TrimCheck(ctx, st, j.Chain, st.Clock())
		return err
	case KindChainSettle:
		if err := j.Validate(); err != nil {
			return err
		}
		if j.Owner != "" {
			return SettleHead(ctx, st, j.Chain, j.Epoch, j.Owner)
		}
		return SettleEpoch(ctx, st, j.Chain, j.Epoch)
	}
	return j.Validate()
}
