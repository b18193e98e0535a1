package sdk

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// dedupeServer stands in for a star's append endpoint: it answers the
// first attempt of each batch 503 after applying it (an ack lost), and
// answers a retry of an applied mark with the original ack, as a star
// does. It records every attempt's mark.
type dedupeServer struct {
	mu       sync.Mutex
	attempts []api.ProducerMark
	applied  map[api.ProducerMark]api.AppendAck
	tail     uint64
	lose     bool // lose the ack of each first attempt
}

func (d *dedupeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	in, perr := api.DecodeAppendProto(body)
	if perr != nil {
		http.Error(w, perr.Message, 400)
		return
	}
	m, ok, _ := api.ProducerOf(in.Records[0].Headers)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.attempts = append(d.attempts, m)
	ack, seen := d.applied[m]
	if !ok || !seen {
		ack = api.AppendAck{Start: api.StreamPosition{SeqNum: d.tail}, End: api.StreamPosition{SeqNum: d.tail + uint64(len(in.Records))}}
		d.tail = ack.End.SeqNum
		ack.Tail = ack.End
		if ok {
			d.applied[m] = ack
		}
		if d.lose {
			e := api.Unavailable("the ack was lost")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(e.Status)
			w.Write(e.JSON())
			return
		}
	}
	w.Header().Set("Content-Type", api.ContentTypeProto)
	w.Write(api.EncodeAppendAckProto(ack))
}

// An idempotent appender's batch whose ack is lost (503, indefinite) is
// retried under the default AppendRetrySafe and answered with the
// original ack; the seq moves on only after an ack. An unmarked append
// with the same loss is not retried (it could duplicate).
func TestIdempotentAppenderRetriesIndefiniteFailures(t *testing.T) {
	d := &dedupeServer{applied: map[api.ProducerMark]api.AppendAck{}, lose: true}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, nil)
	s := c.Basin("b").Stream("s")
	p, err := s.IdempotentAppender("writer-1", 7)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := &api.AppendInput{Records: []api.Record{{Body: []byte("a"), Headers: []api.Header{{Name: []byte("k"), Value: []byte("v")}}}, {Body: []byte("b")}}}
	a0, err := p.Append(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	a1, err := p.Append(ctx, &api.AppendInput{Records: []api.Record{{Body: []byte("c")}}})
	if err != nil {
		t.Fatal(err)
	}
	if a0.Start.SeqNum != 0 || a0.End.SeqNum != 2 || a1.Start.SeqNum != 2 || p.Next() != 2 || d.tail != 3 {
		t.Fatalf("acks %+v %+v, next %d, server tail %d", a0, a1, p.Next(), d.tail)
	}
	m0, m1 := api.ProducerMark{ID: "writer-1", Epoch: 7, Seq: 0}, api.ProducerMark{ID: "writer-1", Epoch: 7, Seq: 1}
	want := []api.ProducerMark{m0, m0, m1, m1}
	if len(d.attempts) != len(want) {
		t.Fatalf("attempts %+v, want %+v", d.attempts, want)
	}
	for i := range want {
		if d.attempts[i] != want[i] {
			t.Fatalf("attempts %+v, want %+v", d.attempts, want)
		}
	}
	if string(in.Records[0].Headers[0].Name) != "k" || len(in.Records[0].Headers) != 1 {
		t.Fatalf("the caller's batch was modified: %+v", in.Records[0].Headers)
	}

	_, err = s.Append(ctx, &api.AppendInput{Records: []api.Record{{Body: []byte("plain")}}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 503 || len(d.attempts) != 5 {
		t.Fatalf("unmarked append: %v after %d attempts, want one 503", err, len(d.attempts)-4)
	}
	if _, err := s.IdempotentAppender("", 0); err == nil {
		t.Fatal("an empty producer id was accepted")
	}
}

// After an indefinite failure that outlasted the retries, the next Append
// is the retry: a batch of another size is refused locally.
func TestIdempotentAppenderHoldsTheSeqAfterIndefiniteFailure(t *testing.T) {
	d := &dedupeServer{applied: map[api.ProducerMark]api.AppendAck{}, lose: true}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, func(cfg *Config) { cfg.Retry = fastRetry(1) })
	p, _ := c.Basin("b").Stream("s").IdempotentAppender("w", 0)
	ctx := context.Background()
	two := &api.AppendInput{Records: []api.Record{{Body: []byte("a")}, {Body: []byte("b")}}}
	if _, err := p.Append(ctx, two); err == nil {
		t.Fatal("the lost ack was not reported")
	}
	if _, err := p.Append(ctx, &api.AppendInput{Records: []api.Record{{Body: []byte("x")}}}); err == nil || !IsDefinite(err) {
		t.Fatalf("another batch before the retry: %v, want a local 422", err)
	}
	ack, err := p.Append(ctx, two)
	if err != nil || ack.Start.SeqNum != 0 || ack.End.SeqNum != 2 || p.Next() != 1 || d.tail != 2 {
		t.Fatalf("the retry: %+v %v, next %d, tail %d", ack, err, p.Next(), d.tail)
	}
}
