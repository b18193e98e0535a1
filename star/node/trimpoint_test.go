package node_test

import (
	"context"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// A trim acknowledged but not settled (no auditor here) survives a crash
// of its leader: the next incarnation, which settles the first one's
// chains through the open gate (span refs written from the bundle
// footers, which carry no trim point), finds the trim command in the
// records before its first read, and reads from below the point start at
// it (issue 29 item 2).
func TestTrimSurvivesCrashRestart(t *testing.T) {
	st := newStores(t)
	ctx := context.Background()
	n1 := open(t, st, testConfig())
	if _, err := n1.CreateBasin(ctx, api.CreateBasinRequest{Basin: "trim-basin"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.CreateStream(ctx, "trim-basin", api.CreateStreamRequest{Stream: "s"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Append(ctx, "trim-basin", "s", records("r", 6), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Append(ctx, "trim-basin", "s", &api.AppendInput{Records: []api.Record{api.TrimRecord(4)}}, nil); err != nil {
		t.Fatal(err)
	}
	first := func(n interface {
		Read(context.Context, string, string, api.ReadRequest, *api.StreamConfig) (api.ReadBatch, error)
	}, when string) {
		t.Helper()
		b, err := n.Read(ctx, "trim-basin", "s", api.ReadRequest{From: api.FromSeqNum, Value: 0}, nil)
		if err != nil || len(b.Records) == 0 || b.Records[0].SeqNum != 4 {
			firstSeq := -1
			if len(b.Records) > 0 {
				firstSeq = int(b.Records[0].SeqNum)
			}
			t.Fatalf("%s: read from 0: %d records from seq %d, %v; want them from 4", when, len(b.Records), firstSeq, err)
		}
	}
	first(n1, "on the leader")
	// Crash-like: no Close (as TestRestartReadsBackEveryAck).
	n2 := open(t, st, testConfig())
	first(n2, "after a crash and restart")
	tail, err := n2.CheckTail(ctx, "trim-basin", "s", nil)
	if err != nil || tail.SeqNum != 7 {
		t.Fatalf("tail after restart: %+v %v, want 7", tail, err)
	}
}
