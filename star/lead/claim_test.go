package lead

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/starlog/starlog/shared/meta"
)

// TestDecideClaim runs decideClaim over testdata/claim.txt: every kind of
// lease and registration it can meet, one case a block. This star is "me",
// incarnation 4, judging at a fixed now with a 30 s dead-after bound.
//
//	claim [lease=held|released|emptied|deleted] [holder=STAR/INC] [to=STAR]
//	      [released] [reg=INC] [state=live|draining|dead|stopped]
//	      [beat=fresh|stale|DURATION] [addr=ADDR] [connected=DURATION]
//
// holder defaults to me/4; reg names the registration of the star the
// lease points at (regStar), absent when it has none; beat is its last
// heartbeat's age (fresh: 1 s, stale: the dead-after bound); connected is
// how long this star's own heartbeats have landed without a gap (absent:
// its last beat failed, no testimony). The output is the decision.
func TestDecideClaim(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	const deadAfter = 30 * time.Second
	me := meta.LeaseHolder{Star: "me", Incarnation: 4}
	datadriven.RunTest(t, "testdata/claim.txt", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "claim" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		v := claimView{me: me, now: now, deadAfter: deadAfter}
		arg := func(key string) (string, bool) {
			a, ok := d.Arg(key)
			if !ok {
				return "", false
			}
			if len(a.Vals) == 0 {
				return "", true
			}
			return a.Vals[0], true
		}
		dur := func(s string) time.Duration {
			p, err := time.ParseDuration(s)
			if err != nil {
				d.Fatalf(t, "duration %q: %v", s, err)
			}
			return p
		}
		if kind, ok := arg("lease"); ok {
			v.leased = true
			v.lease = meta.Lease{LeaseHolder: me, Version: 3}
			if h, ok := arg("holder"); ok {
				v.lease.LeaseHolder = parseHolder(t, d, h)
			}
			v.lease.To, _ = arg("to")
			_, v.lease.Released = arg("released")
			switch kind {
			case "held":
			case "released":
				v.lease.Released = true
			case "emptied":
				v.lease.LeaseHolder, v.lease.Emptied = meta.LeaseHolder{Star: meta.EmptiedBy}, true
			case "deleted":
				v.lease.LeaseHolder, v.lease.Deleted = meta.LeaseHolder{Star: meta.DeletedBy}, true
			default:
				d.Fatalf(t, "unknown lease %q", kind)
			}
		}
		if inc, ok := arg("reg"); ok {
			n, err := strconv.ParseUint(inc, 10, 64)
			if err != nil {
				d.Fatalf(t, "reg %q: %v", inc, err)
			}
			v.registered = true
			v.reg = meta.Registration{Incarnation: n, State: meta.StarLive, Heartbeat: now.Add(-time.Second).UnixMilli()}
			if s, ok := arg("state"); ok {
				v.reg.State = s
			}
			if b, ok := arg("beat"); ok {
				switch b {
				case "fresh":
				case "stale":
					v.reg.Heartbeat = now.Add(-deadAfter).UnixMilli()
				default:
					v.reg.Heartbeat = now.Add(-dur(b)).UnixMilli()
				}
			}
			v.reg.Address, _ = arg("addr")
		}
		if c, ok := arg("connected"); ok {
			switch c {
			case "bound":
				v.self = selfWitness(me, now, deadAfter)
			case "bound-1ms":
				v.self = selfWitness(me, now, deadAfter-time.Millisecond)
			default:
				v.self = selfWitness(me, now, dur(c))
			}
		}
		return formatClaim(decideClaim(v)) + "\n"
	})
}

func parseHolder(t *testing.T, d *datadriven.TestData, s string) meta.LeaseHolder {
	star, inc, ok := strings.Cut(s, "/")
	n, err := strconv.ParseUint(inc, 10, 64)
	if !ok || err != nil {
		d.Fatalf(t, "holder %q: want STAR/INC", s)
	}
	return meta.LeaseHolder{Star: star, Incarnation: n}
}

// formatClaim is a decision as the test file states it.
func formatClaim(c claimDecision) string {
	switch c.act {
	case claimHeld:
		return "held"
	case claimForward:
		return fmt.Sprintf("forward to=%s/%d address=%s", c.target.Star, c.target.Incarnation, c.address)
	case claimAcquire:
		return "acquire from=" + c.from
	case claimMarkDead:
		return "mark-dead"
	case claimWait:
		return "wait"
	case claimNoAddress:
		return "no-address"
	case claimEmptied:
		return "never (emptied or deleted)"
	}
	return fmt.Sprintf("unknown action %d", c.act)
}
