package settle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle/chainsettle"
)

// ChainRef names one chain: a star's per-class write log.
type ChainRef struct {
	Star  string     `json:"star"`
	Class meta.Class `json:"class"`
}

func (c ChainRef) String() string { return c.Star + "/" + string(c.Class) }

func (c ChainRef) Validate() error {
	if c.Star == "" || !c.Class.Valid() {
		return fmt.Errorf("settle: bad chain %q/%q", c.Star, c.Class)
	}
	return nil
}

// Kind is what a job does.
type Kind string

const (
	// KindSettle is a group settle of one era.
	KindSettle Kind = "settle"
	// KindTrim is a trim-check of one chain.
	KindTrim Kind = "trim"
)

// Job is one unit of auditor work: small, JSON-serialisable (it travels
// through a queue), and naming only coordinates, so a job run late or twice
// re-reads everything it acts on.
type Job struct {
	Kind  Kind     `json:"kind"`
	Chain ChainRef `json:"chain"`
	// Epoch, From and End bound a settle job's era: the ripe markers of
	// the epoch whose passes start in slots [From, End).
	Epoch uint64 `json:"epoch,omitempty"`
	From  uint64 `json:"from,omitempty"`
	End   uint64 `json:"end,omitempty"`
}

func (j Job) String() string {
	if j.Kind == KindSettle {
		return fmt.Sprintf("settle %s epoch %d slots [%d,%d)", j.Chain, j.Epoch, j.From, j.End)
	}
	return fmt.Sprintf("%s %s", j.Kind, j.Chain)
}

// Validate checks a job's fields.
func (j Job) Validate() error {
	if err := j.Chain.Validate(); err != nil {
		return err
	}
	switch j.Kind {
	case KindSettle:
		if j.Epoch == 0 || j.End <= j.From {
			return fmt.Errorf("settle: bad settle job: epoch %d slots [%d,%d)", j.Epoch, j.From, j.End)
		}
	case KindTrim:
		if j.Epoch != 0 || j.From != 0 || j.End != 0 {
			return errors.New("settle: a trim job names a chain only")
		}
	default:
		return fmt.Errorf("settle: unknown job kind %q", j.Kind)
	}
	return nil
}

// maxJobBytes bounds an encoded job (SQS allows 256 KiB; a job is ~150 B).
const maxJobBytes = 4 << 10

// Marshal encodes a job for a queue.
func (j Job) Marshal() []byte { return meta.Encode(j) }

// ParseJob decodes and validates a job from a queue message. Unknown
// fields are refused, so a job written by a newer planner is never run
// half-understood.
func ParseJob(b []byte) (Job, error) {
	if len(b) > maxJobBytes {
		return Job{}, fmt.Errorf("settle: job of %d bytes (max %d)", len(b), maxJobBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var j Job
	if err := dec.Decode(&j); err != nil {
		return Job{}, fmt.Errorf("settle: decode job: %w", err)
	}
	if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
		return Job{}, errors.New("settle: trailing data after job")
	}
	if err := j.Validate(); err != nil {
		return Job{}, err
	}
	return j, nil
}

// Do runs one settle job: the whole of a queue consumer's work for it, so
// the Lambda adapters and the in-process runner stay thin. It runs under
// the era's in-flight claim (RunSettle). A trim job is the trim-check of
// shared/reclaim (reclaim.TrimCheck); auditjob.Do runs every kind.
func Do(ctx context.Context, st *Stores, j Job) error {
	if err := j.Validate(); err != nil {
		return err
	}
	if j.Kind != KindSettle {
		return fmt.Errorf("settle: %s is not a settle job (a trim job is reclaim.TrimCheck's)", j)
	}
	_, _, err := RunSettle(ctx, st, j)
	return err
}

// millis is t in unix milliseconds, the unit of marker times.
func millis(t time.Time) int64 { return t.UnixMilli() }

// RunSettle runs a settle job once at a time per era: it takes the era's
// in-flight claim (meta.JobClaimKey, a CAS'd row held chainsettle.ClaimTTL past its
// last renewal) and settles; when another run holds the claim it returns
// ran = false at once, without reading the era: that run is doing the
// work, and should it fail, the era stays ripe and the next plan queues it
// again. Both runtimes reach it through Do, so a message delivered twice,
// an era re-planned while its job still runs, or two in-process runners,
// settle the era once. The claim saves duplicate work only: Settle itself
// stays idempotent and CAS-guarded, so a lapsed claim costs a second walk,
// never a wrong row.
func RunSettle(ctx context.Context, st *Stores, j Job) (rep Report, ran bool, err error) {
	if err := st.Check(); err != nil {
		return rep, false, err
	}
	if err := j.Validate(); err != nil {
		return rep, false, err
	}
	k := meta.JobClaimKey(j.Chain.Star, j.Chain.Class, j.Epoch, j.From)
	ran, err = chainsettle.HoldClaim(ctx, st.Meta, k, chainsettle.Holder(AuditorID), false, func(ctx context.Context) error {
		var err error
		rep, err = Settle(ctx, st, j)
		return err
	})
	if !ran {
		if err != nil {
			return rep, false, fmt.Errorf("settle: %s: %w", j, err)
		}
		st.metrics().jobsSkipped.WithLabelValues(string(j.Chain.Class), string(KindSettle)).Inc()
		st.Log().Info("settle: era already running elsewhere; skipped", "job", j.String())
	}
	return rep, ran, err
}
