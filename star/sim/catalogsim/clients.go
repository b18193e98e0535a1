package catalogsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
)

// opTimeout bounds one client operation (a client's request timeout).
const opTimeout = 20 * time.Second

// client is one API client: it draws its operations from its own seed
// (the order of its requests is its own; which star serves them and what
// the metastore answers is the scheduler's) and reports each to the sim.
type client struct {
	name   string
	rng    *rand.Rand
	ctx    context.Context
	cancel context.CancelFunc
	ops    int
}

// op is one client operation as the checker sees it.
type op struct {
	id           string // c1.17
	kind         string // ensure-basin delete-basin create-stream delete-stream append read check-tail
	basin        string
	stream       string
	via          string    // the incarnation that served it (after a forward)
	start, end   int       // steps (end -1 while running)
	startAt      time.Time // fake time at start
	err          error
	intoDeleted  string // why its sequencing was into a deleted id ("" when not)
	streamID     string // append: the id it was sequenced into
	seqStart     uint64
	bodies       []string
	seqAt, ackAt int
}

func (s *Sim) startClients() {
	for i := range s.sw.Clients {
		c := &client{name: fmt.Sprintf("u%d", i+1), rng: rand.New(rand.NewPCG(s.sw.ClientSeeds[i], 1))}
		c.ctx, c.cancel = context.WithCancel(context.Background())
		s.clients = append(s.clients, c)
		s.task(c.name, func() string { s.runClient(c); return "stopped" })
	}
}

func (s *Sim) runClient(c *client) {
	for c.ctx.Err() == nil {
		t := time.NewTimer(time.Duration(c.rng.Int64N(int64(s.sw.Think))))
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		c.ops++
		o := &op{id: fmt.Sprintf("%s.%d", c.name, c.ops), basin: basinNames[c.rng.IntN(s.sw.Basins)], stream: streamNames[c.rng.IntN(s.sw.Streams)], end: -1}
		star := starNames[c.rng.IntN(s.sw.Stars)]
		switch r := c.rng.IntN(100); {
		case r < 10:
			o.kind, o.stream = "ensure-basin", ""
		case r < 15:
			o.kind, o.stream = "delete-basin", ""
		case r < 23:
			o.kind = "create-stream"
		case r < 30:
			o.kind = "delete-stream"
		case r < 70:
			o.kind = "append"
		case r < 90:
			o.kind = "read"
		default:
			o.kind = "check-tail"
		}
		if s.sw.NoDeletes && strings.HasPrefix(o.kind, "delete-") {
			o.kind = "append"
			if o.stream == "" {
				o.stream = streamNames[c.rng.IntN(s.sw.Streams)]
			}
		}
		inc := s.serving(star)
		if inc == nil {
			continue // connection refused: nothing was asked
		}
		o.via = inc.name
		s.emit(event{src: c.name, start: o})
		ctx, cancel := context.WithTimeout(withWho(c.ctx, c.name), opTimeout)
		var ev event
		ev.src, ev.end = c.name, o
		ev.note = s.do1(ctx, c, inc, o, &ev)
		cancel()
		s.emit(ev)
	}
}

// serving is the newest incarnation of star that serves requests.
func (s *Sim) serving(star string) *incarnation {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.incs) - 1; i >= 0; i-- {
		if inc := s.incs[i]; inc.star == star && inc.serving() && !inc.dead {
			return inc
		}
	}
	return nil
}

func (s *Sim) alive(inc *incarnation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !inc.dead && inc.state != incDown
}

// forward is what a star's server does with a *NotLeaderError: one hop
// to the named leader, marked forwarded.
func (s *Sim) forward(ctx context.Context, err error, o *op) (*incarnation, context.Context, bool) {
	var nl *node.NotLeaderError
	if !errors.As(err, &nl) || nl.Leader.Star == "" {
		return nil, ctx, false
	}
	inc := s.serving(nl.Leader.Star)
	if inc == nil {
		return nil, ctx, false
	}
	o.via += ">" + inc.name
	return inc, node.Forwarded(ctx), true
}

// do1 runs one operation through inc (and the leader it forwards to) and
// returns its trace note; ev carries what the checker needs.
func (s *Sim) do1(ctx context.Context, c *client, inc *incarnation, o *op, ev *event) string {
	n := inc.n
	var err error
	switch o.kind {
	case "ensure-basin":
		_, res, e := n.EnsureBasin(ctx, o.basin, api.EnsureBasinRequest{Config: &api.BasinConfig{CreateStreamOnAppend: true, CreateStreamOnRead: c.rng.IntN(2) == 0}})
		err = e
		if err == nil {
			return res
		}
	case "delete-basin":
		err = n.DeleteBasin(ctx, o.basin)
	case "create-stream":
		_, err = n.CreateStream(ctx, o.basin, api.CreateStreamRequest{Stream: o.stream}, "")
	case "delete-stream":
		if nl := n.LeaderOf(ctx, o.basin, o.stream); nl != nil {
			if to, fctx, ok := s.forward(ctx, nl, o); ok {
				n, ctx = to.n, fctx
			}
		}
		err = n.DeleteStream(ctx, o.basin, o.stream)
	case "append":
		return s.appendOp(ctx, c, inc, o, ev)
	case "read":
		return s.readOp(ctx, inc, o, ev)
	case "check-tail":
		var tail api.StreamPosition
		tail, err = n.CheckTail(ctx, o.basin, o.stream, nil)
		if to, fctx, ok := s.forward(ctx, err, o); ok {
			tail, err = to.n.CheckTail(fctx, o.basin, o.stream, nil)
		}
		if err == nil {
			return fmt.Sprintf("tail %d", tail.SeqNum)
		}
	}
	o.err = err
	return errString(err)
}

func (s *Sim) appendOp(ctx context.Context, c *client, inc *incarnation, o *op, ev *event) string {
	a, err := inc.n.OpenAppend(ctx, o.basin, o.stream, nil)
	if to, fctx, ok := s.forward(ctx, err, o); ok {
		inc, ctx = to, fctx
		a, err = inc.n.OpenAppend(ctx, o.basin, o.stream, nil)
	}
	if err != nil {
		o.err = err
		return errString(err)
	}
	defer a.Close()
	in := &api.AppendInput{}
	k := 1 + c.rng.IntN(3)
	for i := range k {
		in.Records = append(in.Records, api.Record{Body: fmt.Appendf(nil, "%s.r%d", o.id, i)})
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	p, err := a.Submit(sctx, in)
	cancel()
	if err != nil {
		o.err = err
		return errString(err)
	}
	start, _ := p.Sequenced()
	seq := &op{streamID: a.StreamID(), seqStart: start, via: inc.name}
	for _, r := range in.Records {
		seq.bodies = append(seq.bodies, string(r.Body))
	}
	s.emit(event{src: c.name, seq: o, seqInfo: seq})
	ack, err := p.Wait(ctx)
	if err != nil {
		o.err = err
		return "sequenced, then " + errString(err)
	}
	if !s.alive(inc) { // the process died: its answer never reached the client
		o.err = errGone
		return "acked by a dead incarnation: unknown"
	}
	ev.ack = true
	return fmt.Sprintf("acked %s [%d,%d) by %s", abbrev(seq.streamID), ack.Start.SeqNum, ack.End.SeqNum, inc.name)
}

// readRecord is one record a read returned.
type readRecord struct {
	seq  uint64
	body string
}

// readOp reads the stream from seq 0 batch by batch until the tail (416)
// or readCalls calls; ev.readDone says the read reached the tail.
func (s *Sim) readOp(ctx context.Context, inc *incarnation, o *op, ev *event) string {
	next := uint64(0)
	for range readCalls {
		req := api.ReadRequest{From: api.FromSeqNum, Value: next, Count: ptr(uint64(readCount)), Bytes: ptr(uint64(1 << 20))}
		b, err := inc.n.Read(ctx, o.basin, o.stream, req, nil)
		if to, fctx, ok := s.forward(ctx, err, o); ok {
			inc, ctx = to, fctx
			b, err = inc.n.Read(ctx, o.basin, o.stream, req, nil)
		}
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == 416 {
			ev.readDone = true
			return fmt.Sprintf("read %d records to the tail", len(ev.read))
		}
		if err != nil {
			o.err = err
			return fmt.Sprintf("read %d records, then %s", len(ev.read), errString(err))
		}
		if len(b.Records) == 0 {
			break
		}
		for _, r := range b.Records {
			ev.read = append(ev.read, readRecord{seq: r.SeqNum, body: string(r.Body)})
		}
		next = b.Records[len(b.Records)-1].SeqNum + 1
	}
	return fmt.Sprintf("read %d records, not to the tail", len(ev.read))
}

// A client read asks for readCount records per call, in at most
// readCalls calls.
const (
	readCount = 1000
	readCalls = 8
)

func ptr[T any](v T) *T { return &v }

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	var nl *node.NotLeaderError
	if errors.As(err, &nl) {
		return "not-leader(" + nl.Leader.Star + ")"
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return fmt.Sprintf("%d %s", ae.Status, ae.Code)
	}
	return shortErr(err)
}
