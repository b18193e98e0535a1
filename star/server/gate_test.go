package server

import (
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
)

func newGate(n int) *gate {
	return &gate{items: make(chan appendItem, n), closed: make(chan struct{}), abandon: make(chan struct{})}
}

// A reader blocked on a full backlog gives up when the handler abandons
// the session (the client went away), instead of blocking forever.
func TestGatePushGivesUpWhenAbandoned(t *testing.T) {
	t.Parallel()
	g := newGate(1)
	if !g.push(func() appendItem { return appendItem{} }) {
		t.Fatal("first push refused")
	}
	done := make(chan bool)
	go func() { done <- g.push(func() appendItem { return appendItem{} }) }()
	select {
	case <-done:
		t.Fatal("push into a full backlog returned while the writer was still there")
	case <-time.After(50 * time.Millisecond):
	}
	close(g.abandon)
	select {
	case ok := <-done:
		if ok {
			t.Fatal("an abandoned push reported success")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("push stayed blocked after the session was abandoned")
	}
}

// Closing the gate (drain) stops later pushes without running their Submit;
// what was queued stays for the writer.
func TestGateCloseStopsSubmits(t *testing.T) {
	t.Parallel()
	g := newGate(4)
	g.push(func() appendItem { return appendItem{} })
	g.close()
	ran := false
	if g.push(func() appendItem { ran = true; return appendItem{} }) || ran {
		t.Fatal("a push after close ran its submit")
	}
	select {
	case <-g.closed:
	default:
		t.Fatal("close did not signal the writer")
	}
	if len(g.items) != 1 {
		t.Fatalf("%d items queued, want the one pushed before close", len(g.items))
	}
	g.finish() // after close, finish must not close the channel under the writer
	select {
	case _, ok := <-g.items:
		if !ok {
			t.Fatal("items closed")
		}
	default:
	}
}

// An item carrying an error ends the reader; the end of the body closes the
// channel so the writer ends after the last ack.
func TestGateErrorAndFinish(t *testing.T) {
	t.Parallel()
	g := newGate(4)
	if g.push(func() appendItem { return appendItem{err: api.BadFrame("x")} }) {
		t.Fatal("a failed item must stop the reader")
	}
	g.finish()
	if it, ok := <-g.items; !ok || it.err == nil {
		t.Fatal("the failure must reach the writer")
	}
	if _, ok := <-g.items; ok {
		t.Fatal("finish must close the channel")
	}
}
