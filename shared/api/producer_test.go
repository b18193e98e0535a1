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
		{name: "records", hs: hdrs(HeaderProducer, "k", HeaderProducerEpoch, "0", HeaderProducerSeq, "2147483647", HeaderProducerRecords, "3"), ok: true,
			want: ProducerMark{ID: "k", Seq: 2147483647, Records: 3}},
		{name: "records alone", hs: hdrs(HeaderProducerRecords, "3"), invalid: "needs all of"},
		{name: "no records", hs: hdrs(HeaderProducer, "k", HeaderProducerEpoch, "0", HeaderProducerSeq, "0", HeaderProducerRecords, "0"), invalid: "at least 1"},
		{name: "records past the wrap", hs: hdrs(HeaderProducer, "k", HeaderProducerEpoch, "0", HeaderProducerSeq, "2147483648", HeaderProducerRecords, "1"), invalid: "below 2147483648"},
		{name: "records twice", hs: hdrs(HeaderProducer, "k", HeaderProducerEpoch, "0", HeaderProducerSeq, "0", HeaderProducerRecords, "1", HeaderProducerRecords, "1"), invalid: "twice"},
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

// A seq counted in records moves by the batch's records and wraps as
// Kafka's int32 sequence does; one counted in batches moves by one.
func TestProducerNextSeq(t *testing.T) {
	for _, c := range []struct {
		m    ProducerMark
		want uint64
	}{
		{ProducerMark{Seq: 7}, 8},
		{ProducerMark{Seq: 7, Records: 5}, 12},
		{ProducerMark{Seq: ProducerSeqWrap - 2, Records: 5}, 3},
		{ProducerMark{Seq: ProducerSeqWrap - 5, Records: 5}, 0},
	} {
		if got := c.m.NextSeq(); got != c.want {
			t.Errorf("%+v: next %d, want %d", c.m, got, c.want)
		}
	}
	m := ProducerMark{ID: "k", Epoch: 2, Seq: 9, Records: 4}
	if got, ok, err := ProducerOf(ProducerHeaders(m)); !ok || err != nil || got != m {
		t.Fatalf("ProducerHeaders(%+v) reads back as %+v %v %v", m, got, ok, err)
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
