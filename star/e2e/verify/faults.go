package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/devfaults"
)

// The dev fault control's wire shape (star/devfaults).
type (
	FaultSetting = devfaults.Setting
	FaultsDoc    = devfaults.Doc
	FaultPatch   = devfaults.Patch
	FaultsPatch  = devfaults.DocPatch
)

var faultHTTP = &http.Client{Timeout: 5 * time.Second}

// faultCall sends one request to a star's fault control (base URL) and
// decodes the state it answers. Refused connections are retried briefly:
// a control call must not fail the run because of one dropped request.
func faultCall(ctx context.Context, base, method string, body any) (FaultsDoc, error) {
	var doc FaultsDoc
	if base == "" {
		return doc, fmt.Errorf("the star has no dev fault control")
	}
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return doc, err
		}
	}
	var last error
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return doc, fmt.Errorf("%w (last: %w)", ctx.Err(), last)
			case <-time.After(200 * time.Millisecond):
			}
		}
		req, err := http.NewRequestWithContext(ctx, method, base+"/faults", bytes.NewReader(raw))
		if err != nil {
			return doc, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(auth.HeaderInternal, internalCredential())
		res, err := faultHTTP.Do(req)
		if err != nil {
			last = err
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return doc, fmt.Errorf("%s %s/faults: %s: %s", method, base, res.Status, strings.TrimSpace(string(b)))
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			return doc, fmt.Errorf("%s %s/faults: %w", method, base, err)
		}
		return doc, nil
	}
	return doc, fmt.Errorf("%s %s/faults: %w", method, base, last)
}

// GetFaults reads a star's fault state.
func GetFaults(ctx context.Context, s *Star) (FaultsDoc, error) {
	return faultCall(ctx, s.FaultControl(), http.MethodGet, nil)
}

// PutFaults applies a change to a star's fault state.
func PutFaults(ctx context.Context, s *Star, p FaultsPatch) (FaultsDoc, error) {
	return faultCall(ctx, s.FaultControl(), http.MethodPut, p)
}

// ClearFaults clears every fault of a star.
func ClearFaults(ctx context.Context, s *Star) (FaultsDoc, error) {
	return faultCall(ctx, s.FaultControl(), http.MethodDelete, nil)
}

// StoreFaultKind is what a StoreFault breaks.
type StoreFaultKind uint8

const (
	// SlowBucket adds latency to every request on one bucket (any set).
	SlowBucket StoreFaultKind = iota
	// DownExpressBucket fails every request on one bucket of the Express
	// set: with W=2 of K=3 appends must still be acknowledged.
	DownExpressBucket
	// DownStandardBucket fails every request on the Standard bucket (K=1):
	// Standard appends stall (or fail indefinitely) until the repair.
	DownStandardBucket
	// SlowMeta adds latency to every metastore call.
	SlowMeta
	// DownMeta fails every metastore call of every star.
	DownMeta
	// PartitionMeta fails every metastore call of one star for longer
	// than dead-after: its registry heartbeat ages, the other stars take
	// its streams over while it still runs.
	PartitionMeta
)

func (k StoreFaultKind) String() string {
	switch k {
	case SlowBucket:
		return "slow-bucket"
	case DownExpressBucket:
		return "down-express-bucket"
	case DownStandardBucket:
		return "down-standard-bucket"
	case SlowMeta:
		return "slow-meta"
	case DownMeta:
		return "down-meta"
	case PartitionMeta:
		return "partition-meta"
	}
	return fmt.Sprintf("store-fault(%d)", uint8(k))
}

// StoreFaultKinds are every kind, in order.
var StoreFaultKinds = []StoreFaultKind{SlowBucket, DownExpressBucket, DownStandardBucket, SlowMeta, DownMeta, PartitionMeta}

// StoreFault slows or downs a bucket or the metastore through the stars'
// dev fault controls, holds the fault for a random time in [MinHold,
// MaxHold) and clears it. A fault is per star process (its view of the
// stores): bucket faults and slow-meta hit every star or one at random,
// down-meta every star, partition-meta one star.
type StoreFault struct {
	Kind StoreFaultKind
	// Standard and Express are the bucket sets (the stars' flags).
	Standard, Express []string
	// MinHold and MaxHold bound how long the fault holds.
	MinHold, MaxHold time.Duration
	Rand             *rand.Rand
	mu               sync.Mutex
}

// Name implements Fault.
func (f *StoreFault) Name() string { return f.Kind.String() }

// Inject implements Fault.
func (f *StoreFault) Inject(ctx context.Context, c *Cluster) (FaultEvent, error) {
	f.mu.Lock()
	hold := f.MinHold
	if f.MaxHold > f.MinHold {
		hold += time.Duration(f.Rand.Int64N(int64(f.MaxHold - f.MinHold)))
	}
	// Which stars: every one, or one at random.
	one := f.Rand.IntN(len(c.Stars))
	all := f.Rand.IntN(3) != 0
	switch f.Kind {
	case DownMeta:
		all = true
	case PartitionMeta:
		all = false
	}
	var p FaultsPatch
	var what string
	yes := true
	switch f.Kind {
	case SlowBucket:
		buckets := append(append([]string(nil), f.Standard...), f.Express...)
		b := buckets[f.Rand.IntN(len(buckets))]
		ms := int64(100 + f.Rand.IntN(900))
		p.Buckets = map[string]*FaultPatch{b: {LatencyMS: &ms}}
		what = fmt.Sprintf("%s +%dms", b, ms)
	case DownExpressBucket:
		b := f.Express[f.Rand.IntN(len(f.Express))]
		p.Buckets = map[string]*FaultPatch{b: {Down: &yes}}
		what = b + " down"
	case DownStandardBucket:
		b := f.Standard[f.Rand.IntN(len(f.Standard))]
		p.Buckets = map[string]*FaultPatch{b: {Down: &yes}}
		what = b + " down"
	case SlowMeta:
		ms := int64(50 + f.Rand.IntN(450))
		p.Meta = &FaultPatch{LatencyMS: &ms}
		what = fmt.Sprintf("metastore +%dms", ms)
	case DownMeta, PartitionMeta:
		p.Meta = &FaultPatch{Down: &yes}
		what = "metastore down"
	}
	f.mu.Unlock()

	targets := c.Stars
	ev := FaultEvent{Fault: f.Name(), Star: -1}
	if !all {
		targets = c.Stars[one : one+1]
		ev.Star = one
	}
	if all {
		ev.Detail = what + " on every star"
	} else {
		ev.Detail = fmt.Sprintf("%s on star %d", what, one)
	}
	ev.Detail += fmt.Sprintf(" for %v", hold.Round(time.Millisecond))
	t0 := time.Now()
	// Repair whatever happens (even when ctx ends): the read-back needs
	// the stores.
	repair := func() error {
		var errs []string
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, s := range targets {
			if _, err := ClearFaults(rctx, s); err != nil && !s.Exited() {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("repair %s: %s", ev.Detail, strings.Join(errs, "; "))
		}
		return nil
	}
	for i, s := range targets {
		if _, err := PutFaults(ctx, s, p); err != nil {
			if s.Exited() {
				// It exited (a zombie, say) since the last check: the
				// supervisor after this fault judges the exit.
				ev.Detail += fmt.Sprintf(" (target %d had exited)", i)
				continue
			}
			_ = repair()
			return ev, fmt.Errorf("inject %s: %w", ev.Detail, err)
		}
	}
	select {
	case <-time.After(hold):
	case <-ctx.Done():
	}
	if err := repair(); err != nil {
		return ev, err
	}
	if f.Kind == PartitionMeta {
		// A partition past dead-after deposes its star, which learns it
		// from its first beat after the heal and then exits (a graceful
		// close): that is this fault's outcome, so wait for it here, or
		// the exit lands in the next fault (a zone-halt would count the
		// exiting star's refusals as its own failures) and the supervisor
		// misses it until after that fault.
		ev.Detail += "; " + awaitVerdict(ctx, targets[0], partitionVerdictWait)
	}
	ev.Recovered = time.Since(t0)
	return ev, nil
}

// partitionVerdictWait bounds awaitVerdict: a beat after the heal, then a
// graceful close (`star serve --shutdown-timeout`, 5 s here).
const partitionVerdictWait = 15 * time.Second

// awaitVerdict waits until star s, just reconnected to the metastore, has
// either beaten again as the same incarnation (it was not deposed) or
// exited (it was, and its supervisor restarts it), at most bound; it says
// which.
func awaitVerdict(ctx context.Context, s *Star, bound time.Duration) string {
	healed := time.Now()
	for deadline := healed.Add(bound); ctx.Err() == nil; {
		if s.Exited() {
			return fmt.Sprintf("it exited %v after the heal", time.Since(healed).Round(time.Millisecond))
		}
		if doc, ok, _ := ReadHealth(ctx, s.Endpoint()); ok && time.Duration(doc.HeartbeatAgeMS)*time.Millisecond < time.Since(healed) {
			return fmt.Sprintf("it beat again %v after the heal", time.Since(healed).Round(time.Millisecond))
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("neither a beat nor an exit within %v of the heal", bound)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return "cancelled"
}

// HasFaultControl reports whether the binary's `star serve` takes the
// hidden --dev-fault-listen flag (cobra refuses unknown flags even with
// --help).
func HasFaultControl(ctx context.Context, binary string) bool {
	cmd := exec.CommandContext(ctx, binary, "serve", "--dev-fault-listen", "127.0.0.1:0", "--help")
	return cmd.Run() == nil
}
