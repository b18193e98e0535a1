package chainsim

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/format"
)

// bucketHealth is one bucket's fault, while now < until.
type bucketHealth struct {
	mode  string // "down" (fail fast), "hang" (no answer), "slow"
	until time.Time
	delay time.Duration // slow: how late each call is answered
}

// Fault durations on the menu.
var (
	faultDurations = []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second, 20 * time.Second}
	slowDelays     = []time.Duration{50 * time.Millisecond, 400 * time.Millisecond, 2 * time.Second}
	pauseDurations = []time.Duration{500 * time.Millisecond, 3 * time.Second, 15 * time.Second, 60 * time.Second}
)

// envEvent may inject one environment event as this step: a fault, or an
// actor's start, drawn from the kinds that apply now.
func (s *Sim) envEvent() bool {
	kinds := s.applicable()
	if len(kinds) == 0 || !s.chance(s.sw.PEnv) {
		return false
	}
	k := kinds[s.ch.Pick(len(kinds))]
	s.faultCounts[k.String()]++
	now := time.Now()
	switch k {
	case EnvDown, EnvHang:
		b := s.ch.Pick(s.sw.K)
		d := faultDurations[s.ch.Pick(len(faultDurations))]
		mode := map[EnvKind]string{EnvDown: "down", EnvHang: "hang"}[k]
		s.health[b] = bucketHealth{mode: mode, until: now.Add(d)}
		s.trace.add(s, fmt.Sprintf("env %s %s for %v", mode, s.objs.names[b], d))
	case EnvSlow:
		b := s.ch.Pick(s.sw.K)
		d := faultDurations[s.ch.Pick(len(faultDurations))]
		delay := slowDelays[s.ch.Pick(len(slowDelays))]
		s.health[b] = bucketHealth{mode: "slow", until: now.Add(d), delay: delay}
		s.trace.add(s, fmt.Sprintf("env slow %s by %v for %v", s.objs.names[b], delay, d))
	case EnvCorrupt, EnvForeign:
		ts := s.chk.damageable()
		t := ts[s.ch.Pick(len(ts))]
		s.damage(t, k)
	case EnvPause:
		as := s.pausable(now)
		a := as[s.ch.Pick(len(as))]
		d := pauseDurations[s.ch.Pick(len(pauseDurations))]
		a.pausedUntil = now.Add(d)
		s.trace.add(s, fmt.Sprintf("env pause %s for %v", a.name, d))
	case EnvCrash:
		as := s.crashable()
		s.crash(as[s.ch.Pick(len(as))])
	case EnvRestart, EnvZombie:
		s.startWriter()
	case EnvFence:
		s.startFencer(fmt.Sprintf("f%d", s.fencers+1), roleFencer, false)
	case EnvTrim:
		s.startTrimmer()
	}
	return true
}

// applicable lists the event kinds the swarm allows that can strike now.
func (s *Sim) applicable() []EnvKind {
	now := time.Now()
	var out []EnvKind
	for k := range numEnvKinds {
		if !s.sw.Env[k] {
			continue
		}
		ok := true
		switch k {
		case EnvCorrupt, EnvForeign:
			ok = len(s.chk.damageable()) > 0
		case EnvPause:
			ok = len(s.pausable(now)) > 0
		case EnvCrash:
			ok = len(s.crashable()) > 0
		case EnvRestart:
			ok = len(s.alive(roleWriter)) == 0 && s.incarnation < uint64(s.sw.Incarnations)
		case EnvZombie:
			ok = s.incarnation < uint64(s.sw.Incarnations) && slices.ContainsFunc(s.alive(roleWriter), func(a *actor) bool { return now.Before(a.pausedUntil) })
		case EnvFence:
			ok = s.fencers < s.sw.Fencers
		case EnvTrim:
			ok = s.trims < s.sw.Trims && len(s.alive(roleTrimmer)) == 0
		}
		if ok {
			out = append(out, k)
		}
	}
	return out
}

func (s *Sim) pausable(now time.Time) []*actor {
	var out []*actor
	for _, a := range s.crashable() {
		if !now.Before(a.pausedUntil) {
			out = append(out, a)
		}
	}
	return out
}

func (s *Sim) crashable() []*actor {
	var out []*actor
	for _, r := range []role{roleWriter, roleFencer, roleTrimmer} {
		out = append(out, s.alive(r)...)
	}
	return out
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// damage changes a stored copy at rest: a flipped byte in its envelope,
// its footer or a record block (corrupt), or a well-formed envelope of a
// version this build does not know (foreign). What was landed is kept for
// the checker.
func (s *Sim) damage(t target, k EnvKind) {
	obj := s.objs.buckets[t.bucket][t.key]
	data := slices.Clone(obj.data)
	what := ""
	switch {
	case k == EnvForeign:
		data[4] = format.Version + 1
		binary.LittleEndian.PutUint32(data[56:], crc32.Checksum(data[:56], castagnoli))
		what = "foreign"
	default:
		env, _ := format.DecodeEnvelope(data)
		region := s.ch.Pick(3)
		lo, hi := 0, format.EnvelopeSize // the envelope
		switch {
		case region == 1 && env.Kind == format.KindFlight: // the footer
			lo, hi = int(env.FooterOffset), len(data)
		case region == 2 && env.Kind == format.KindFlight: // the record blocks
			lo, hi = format.EnvelopeSize, int(env.FooterOffset)
		}
		i := lo + s.ch.Pick(hi-lo)
		data[i] ^= 0xff
		what = fmt.Sprintf("corrupt byte %d", i)
	}
	s.objs.set(t.bucket, t.key, &object{data: data, orig: obj.orig, damage: what})
	s.trace.add(s, fmt.Sprintf("env %s %s %s", what, s.objs.names[t.bucket], abbrev(t.key)))
}
