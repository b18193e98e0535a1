package servecmd

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/meta"
)

// `star settle quarantine list` shows a quarantined stream of the dev
// data folder; `retry` and `force` of an unknown stream fail.
func TestSettleQuarantineCommand(t *testing.T) {
	data := t.TempDir()
	var c common
	cfg := c.nodeConfig()
	ms, objs, err := openDevStores(context.Background(), data, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// While a store holds the folder's journal, the command is refused
	// (the test's store stands for a running star dev).
	if _, err := runSettle(data, "quarantine", "list"); err == nil || !strings.Contains(err.Error(), "is a star dev running") {
		t.Fatalf("list beside a running star dev's store: %v", err)
	}
	objs.(io.Closer).Close()
	k := meta.SettleFailKey("s-1")
	f := meta.SettleFail{Failures: 3, Err: "boom", Quarantined: 1, Basin: "b1", Pins: []meta.SlotPin{{Star: "x", Class: meta.Express, Epoch: 1, From: 2, End: 3}}}
	if _, err := ms.Put(context.Background(), k.PK, k.SK, meta.Encode(f), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	ms.Close()
	run := func(args ...string) (string, error) { return runSettle(data, args...) }
	out, err := run("quarantine", "list")
	if err != nil || !strings.Contains(out, "s-1") || !strings.Contains(out, "boom") || !strings.Contains(out, "b1") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if _, err := run("quarantine", "retry", "s-2"); err == nil || !strings.Contains(err.Error(), "not quarantined") {
		t.Fatalf("retry of an unknown stream: %v", err)
	}
	if _, err := run("quarantine", "force", "s-2"); err == nil {
		t.Fatal("force of an unknown stream succeeded")
	}
}

// runSettle runs `star settle ARGS --data data` and returns its output.
func runSettle(data string, args ...string) (string, error) {
	cmd := Settle()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append(args, "--data", data))
	err := cmd.Execute()
	return out.String(), err
}
