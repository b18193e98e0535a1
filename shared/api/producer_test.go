package api

import (
	"net/http"
	"strings"
	"testing"
)

func hdrs(kv ...string) []Header {
	var hs []Header
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, Header{Name: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	return hs
}

func TestProducerOf(t *testing.T) {
	long := strings.Repeat("x", MaxProducerIDBytes+1)
	for _, c := range []struct {
		name    string
		hs      []Header
		ok      bool
		want    ProducerMark
		invalid string
	}{
		{name: "none", hs: hdrs("other", "1")},
		{name: "valid", hs: hdrs("a", "b", HeaderProducer, "p", HeaderProducerEpoch, "3", HeaderProducerSeq, "18446744073709551615"), ok: true,
			want: ProducerMark{ID: "p", Epoch: 3, Seq: 18446744073709551615}},
		{name: "max id", hs: hdrs(HeaderProducer, long[1:], HeaderProducerEpoch, "0", HeaderProducerSeq, "0"), ok: true,
			want: ProducerMark{ID: long[1:]}},
		{name: "id too long", hs: hdrs(HeaderProducer, long, HeaderProducerEpoch, "0", HeaderProducerSeq, "0"), invalid: "1 to 128 bytes"},
		{name: "empty id", hs: hdrs(HeaderProducer, "", HeaderProducerEpoch, "0", HeaderProducerSeq, "0"), invalid: "1 to 128 bytes"},
		{name: "seq without id", hs: hdrs(HeaderProducerEpoch, "0", HeaderProducerSeq, "0"), invalid: "needs all of"},
		{name: "id without seq", hs: hdrs(HeaderProducer, "p", HeaderProducerEpoch, "0"), invalid: "needs all of"},
		{name: "bad decimal", hs: hdrs(HeaderProducer, "p", HeaderProducerEpoch, "0", HeaderProducerSeq, "-1"), invalid: "starlog-producer-seq"},
		{name: "leading zero", hs: hdrs(HeaderProducer, "p", HeaderProducerEpoch, "01", HeaderProducerSeq, "0"), invalid: "starlog-producer-epoch"},
		{name: "overflow", hs: hdrs(HeaderProducer, "p", HeaderProducerEpoch, "0", HeaderProducerSeq, "18446744073709551616"), invalid: "starlog-producer-seq"},
		{name: "twice", hs: hdrs(HeaderProducer, "p", HeaderProducer, "q", HeaderProducerEpoch, "0", HeaderProducerSeq, "0"), invalid: "twice"},
	} {
		m, ok, err := ProducerOf(c.hs)
		if c.invalid != "" {
			if err == nil || err.Status != http.StatusUnprocessableEntity || !strings.Contains(err.Message, c.invalid) {
				t.Errorf("%s: got %v, want 422 mentioning %q", c.name, err, c.invalid)
			}
			continue
		}
		if err != nil || ok != c.ok || m != c.want {
			t.Errorf("%s: got %+v %v %v, want %+v %v", c.name, m, ok, err, c.want, c.ok)
		}
	}
}

func TestProducerConflictRoundTrips(t *testing.T) {
	for _, e := range []*Error{ProducerSeqGap("p", 1, 5, 3), ProducerEpochStale("p", 0, 2), ProducerAckForgotten("p", 0, 1, 9)} {
		got := ParseError(e.Status, e.JSON())
		if got.Status != http.StatusConflict || got.Code != e.Code || got.Message != e.Message || !got.Definite() || got.Retryable() {
			t.Fatalf("%v parsed back as %v", e, got)
		}
		s1, ok1 := e.ProducerExpectedSeq()
		s2, ok2 := got.ProducerExpectedSeq()
		e1, ok3 := e.ProducerCurrentEpoch()
		e2, ok4 := got.ProducerCurrentEpoch()
		if s1 != s2 || ok1 != ok2 || e1 != e2 || ok3 != ok4 {
			t.Fatalf("%v: numbers lost: %d/%v %d/%v %d/%v %d/%v", e, s1, ok1, s2, ok2, e1, ok3, e2, ok4)
		}
	}
}
