package settle

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// Config is the settlement policy (docs/design.md §10) and the auditor's local
// resources. The star derives its absorb ripening from it (Ripening) and
// the auditor functions plan, settle and trim with it, so the two read one
// set of flags. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Trigger is the standing (un-settled) bytes of a stream whose
	// crossing ripens its batch marker at linger rather than age cap, and
	// below which a linger-ripened era leaves a live stream standing.
	Trigger uint64
	// Standard and Express are the per-class timers. The jitter is not a
	// knob: absorb.Ripening spreads each stream deterministically over up
	// to half its class's linger.
	Standard, Express ClassTimers
	// OutputCap bounds a settled object: a settle extends the stream's
	// tail object while it is below the cap, and starts a new object once
	// the blocks reach it.
	OutputCap uint64
	// ReadGrace is how long a resolved slot stays readable before the
	// trim-check deletes it, so a reader holding a row it fetched moments
	// ago is never cut off.
	ReadGrace time.Duration
	// Workers bounds the streams one settle job works on at once (and the
	// bundles it warms at once).
	Workers int
	// ScratchDir holds the settle job's fetch cache of warmed bundles
	// (Lambda: /tmp). Each job uses its own subdirectory and removes it.
	ScratchDir string
	// ScratchBytes bounds the bundle bytes one settle job's fetch cache
	// holds on ScratchDir at once, and FooterBytes the memory of the
	// bundle footer entries it keeps indexed (Lambda: derived from the
	// function's ephemeral storage and memory). An era whose qualifying
	// streams need more is settled in rounds of streams, each within both;
	// a bundle that would pass either is refused (ErrScratchBudget).
	ScratchBytes, FooterBytes int64
	// QuarantineAfter is how many consecutive settle jobs a stream fails
	// in before it is quarantined (docs/settle.md "Quarantine").
	QuarantineAfter int
	// EraMaxSlots and EraMaxBytes bound the slots of one era and its
	// markers' bytes, so one job's work stays bounded (a single larger
	// marker is an era of its own). Gathering (ClassTimers.Gather) fills
	// eras up to them: 2 GiB is some 10,000 Standard slots at density.
	EraMaxSlots int
	EraMaxBytes uint64
	// PlanMaxMarkers bounds the marker rows Plan reads per chain per
	// invocation (from each epoch's settle frontier up): markers past it
	// are planned by a later invocation, once the frontier has moved.
	PlanMaxMarkers int
	// DeadAfter is how old a star's registry heartbeat gets before the
	// janitor presumes it dead and settles its chains: the stars'
	// --dead-after (STARLOG_DEAD_AFTER), which must agree with it.
	DeadAfter time.Duration
}

// ClassTimers are one class's ripening timers.
type ClassTimers struct {
	// Linger: a marker whose pass made a stream cross the trigger ripens
	// at birth + Linger + the stream's jitter.
	Linger time.Duration
	// AgeCap: any other marker ripens at birth + AgeCap, the bound on how
	// long a committed byte stays transit-resident.
	AgeCap time.Duration
	// Gather: an era that starts at a ripe marker also takes the age-cap
	// markers after it that ripen within Gather, settling them early. At
	// density every marker names every stream and none crosses the
	// trigger, so without it each pass's marker is an era that rewrites
	// every stream's tail once; with it a stream settles about once per
	// Gather. Zero takes two thirds of AgeCap; negative turns it off.
	Gather time.Duration
}

// DefaultConfig returns the defaults of docs/design.md §13.
func DefaultConfig() Config {
	return Config{
		Trigger:         8 << 20,
		Standard:        ClassTimers{Linger: 60 * time.Second, AgeCap: 15 * time.Minute},
		Express:         ClassTimers{Linger: 10 * time.Second, AgeCap: 2 * time.Minute},
		OutputCap:       256 << 20,
		ReadGrace:       5 * time.Minute,
		Workers:         8,
		ScratchDir:      os.TempDir(),
		EraMaxSlots:     16384,
		EraMaxBytes:     2 << 30,
		QuarantineAfter: 3,
		// One era's bundles (EraMaxBytes) and its footer entries at a few
		// hundred bytes per block.
		ScratchBytes: 2 << 30,
		FooterBytes:  64 << 20,
		// 15 min of passes at 1 s apart is 900 markers per chain.
		PlanMaxMarkers: 4096,
		DeadAfter:      leader.DefaultDeadAfter,
	}
}

// WithDefaults fills every zero field from DefaultConfig.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.Trigger == 0 {
		c.Trigger = d.Trigger
	}
	c.Standard = c.Standard.withDefaults(d.Standard)
	c.Express = c.Express.withDefaults(d.Express)
	if c.OutputCap == 0 {
		c.OutputCap = d.OutputCap
	}
	if c.ReadGrace <= 0 {
		c.ReadGrace = d.ReadGrace
	}
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.ScratchDir == "" {
		c.ScratchDir = d.ScratchDir
	}
	if c.EraMaxSlots <= 0 {
		c.EraMaxSlots = d.EraMaxSlots
	}
	if c.EraMaxBytes == 0 {
		c.EraMaxBytes = d.EraMaxBytes
	}
	if c.QuarantineAfter <= 0 {
		c.QuarantineAfter = d.QuarantineAfter
	}
	if c.ScratchBytes <= 0 {
		c.ScratchBytes = d.ScratchBytes
	}
	if c.FooterBytes <= 0 {
		c.FooterBytes = d.FooterBytes
	}
	if c.PlanMaxMarkers <= 0 {
		c.PlanMaxMarkers = d.PlanMaxMarkers
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = d.DeadAfter
	}
	return c
}

func (t ClassTimers) withDefaults(d ClassTimers) ClassTimers {
	if t.Linger <= 0 {
		t.Linger = d.Linger
	}
	if t.AgeCap <= 0 {
		t.AgeCap = d.AgeCap
	}
	return t
}

// EraGather is the gather in effect: Gather, or two thirds of the age cap
// when it is zero (Standard 10 min, Express 80 s by default), or none.
func (t ClassTimers) EraGather() time.Duration {
	switch {
	case t.Gather == 0:
		return t.AgeCap * 2 / 3
	case t.Gather < 0:
		return 0
	}
	return t.Gather
}

// Validate checks a config after WithDefaults.
func (c Config) Validate() error {
	var errs []error
	for _, ct := range []struct {
		name string
		t    ClassTimers
	}{{"standard", c.Standard}, {"express", c.Express}} {
		if ct.t.Linger > ct.t.AgeCap {
			errs = append(errs, fmt.Errorf("settle: %s linger %v exceeds its age cap %v", ct.name, ct.t.Linger, ct.t.AgeCap))
		}
		if g := ct.t.EraGather(); g >= ct.t.AgeCap {
			errs = append(errs, fmt.Errorf("settle: %s gather %v is not below its age cap %v", ct.name, g, ct.t.AgeCap))
		}
	}
	if c.OutputCap < c.Trigger {
		errs = append(errs, fmt.Errorf("settle: output cap %d is below the trigger %d", c.OutputCap, c.Trigger))
	}
	return errors.Join(errs...)
}

// Timers returns class's timers.
func (c Config) Timers(class meta.Class) ClassTimers {
	if class == meta.Express {
		return c.Express
	}
	return c.Standard
}

// Ripening is the absorb's marker schedule for class: the star's loglets
// take it from here so markers ripen by the policy the auditor settles by.
func (c Config) Ripening(class meta.Class) absorb.Ripening {
	t := c.Timers(class)
	return absorb.Ripening{Trigger: c.Trigger, Linger: t.Linger, AgeCap: t.AgeCap}
}

// Stores is everything a job needs: the stores, the deleted-stream check,
// the policy and the instruments. One value serves every job of a process.
type Stores struct {
	Meta    meta.Store
	Objects objstore.Store
	// SettledBucket is the standard bucket every settled object lands in,
	// whatever the stream's class.
	SettledBucket string
	// Streams says whether a stream is alive and names its basin.
	Streams Streams
	Config  Config
	// Metrics (nil: recorded nowhere).
	Metrics *Metrics
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
	// Now is the job clock (nil: time.Now); Plan and TrimCheck take their
	// time as an argument.
	Now func() time.Time
}

func (st *Stores) cfg() Config { return st.Config.WithDefaults() }

// Log is the jobs' logger: Logger, or slog.Default().
func (st *Stores) Log() *slog.Logger {
	if st.Logger != nil {
		return st.Logger
	}
	return slog.Default()
}

// Clock reads the job clock: Now, or time.Now.
func (st *Stores) Clock() time.Time { return st.now() }

func (st *Stores) now() time.Time {
	if st.Now != nil {
		return st.Now()
	}
	return time.Now()
}

func (st *Stores) metrics() *Metrics {
	if st.Metrics != nil {
		return st.Metrics
	}
	return nopMetrics
}

func (st *Stores) Check() error {
	switch {
	case st.Meta == nil || st.Objects == nil:
		return errors.New("settle: Stores needs Meta and Objects")
	case st.SettledBucket == "":
		return errors.New("settle: Stores needs SettledBucket")
	case st.Streams == nil:
		return errors.New("settle: Stores needs Streams")
	}
	return st.cfg().Validate()
}
