package servecmd

import (
	"bytes"
	"context"
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
	ms, _, err := openDevStores(context.Background(), data, cfg)
	if err != nil {
		t.Fatal(err)
	}
	k := meta.SettleFailKey("s-1")
	f := meta.SettleFail{Failures: 3, Err: "boom", Quarantined: 1, Basin: "b1", Pins: []meta.SlotPin{{Star: "x", Class: meta.Express, Epoch: 1, From: 2, End: 3}}}
	if _, err := ms.Put(context.Background(), k.PK, k.SK, meta.Encode(f), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	ms.Close()
	run := func(args ...string) (string, error) {
		cmd := Settle()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append(args, "--data", data))
		err := cmd.Execute()
		return out.String(), err
	}
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
