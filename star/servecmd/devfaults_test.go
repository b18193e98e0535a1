package servecmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/devfaults"
)

var faultAddrRE = regexp.MustCompile(`dev fault control: listening[^"]*" addr=(\S+)`)

// faultCall sends one request to a star's dev fault control.
func faultCall(t *testing.T, base, method, body string) (int, devfaults.Doc, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+"/faults", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(auth.HeaderInternal, internalCred())
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s /faults: %v", method, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	var doc devfaults.Doc
	if res.StatusCode == http.StatusOK {
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatalf("%s /faults: %s: %v", method, out, err)
		}
	}
	return res.StatusCode, doc, string(out)
}

// appendWithin sends one append to stream and gives up after d.
func appendWithin(url, stream string, d time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/streams/"+stream+"/records", strings.NewReader(`{"records":[{"body":"x"}]}`))
	if err != nil {
		return 0, err
	}
	req.Header.Set("s2-basin", "starlog-dev")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	res, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	io.Copy(io.Discard, res.Body)
	return res.StatusCode, nil
}

// `star serve --dev-fault-listen`: the control lists the metastore and
// every bucket of the star; a downed metastore fails stream creation and
// a slow one delays it; a downed bucket set stops appends from acking;
// DELETE clears everything and the star serves again.
func TestDevFaultControl(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	dir := t.TempDir()
	p := startServe(t, append(twoStarEnv(dir, "a"), "STARLOG_DEV_FAULT_LISTEN=127.0.0.1:0"))
	m := faultAddrRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no dev fault control address in the log\n%s", p.stderr)
	}
	ctl := "http://" + m[1]

	status, doc, out := faultCall(t, ctl, "GET", "")
	if status != 200 {
		t.Fatalf("GET /faults: %d %s", status, out)
	}
	want := []string{"standard", "express-a", "express-b", "express-c"}
	if len(doc.Buckets) != len(want) || doc.Meta != (devfaults.Setting{}) {
		t.Fatalf("GET /faults: %s, want every fault clear on buckets %v", out, want)
	}
	for _, b := range want {
		if s, ok := doc.Buckets[b]; !ok || s != (devfaults.Setting{}) {
			t.Fatalf("GET /faults: %s, want bucket %s clear", out, b)
		}
	}
	for _, bad := range []string{
		`{"buckets":{"elsewhere":{"down":true}}}`,
		`{"meta":{"latency_ms":-1}}`,
		`{"meta":{"latency":5}}`,
		`{"meta":{"hang":true}}`,
		`{"meta":`,
	} {
		if status, _, out := faultCall(t, ctl, "PUT", bad); status != 400 {
			t.Fatalf("PUT /faults %s: %d %s, want 400", bad, status, out)
		}
	}
	if _, doc, _ := faultCall(t, ctl, "GET", ""); doc.Meta != (devfaults.Setting{}) || doc.Buckets["standard"] != (devfaults.Setting{}) {
		t.Fatalf("a rejected PUT changed the state: %+v", doc)
	}

	if status, out, err := call(p, "POST", "/v1/basins", `{"basin":"starlog-dev","config":{"create_stream_on_append":true}}`); err != nil || status != 201 {
		t.Fatalf("create basin: %d %s %v", status, out, err)
	}
	if status, out, err := post(p.url, "s1", false, []string{"first"}); err != nil || status != 200 {
		t.Fatalf("first append: %d %s %v", status, out, err)
	}

	// Metastore down: creating a stream fails; cleared, it works.
	status, doc, out = faultCall(t, ctl, "PUT", `{"meta":{"down":true}}`)
	if status != 200 || !doc.Meta.Down || doc.Meta.LatencyMS != 0 {
		t.Fatalf("PUT meta down: %d %s", status, out)
	}
	if status, out, err := call(p, "POST", "/v1/streams", `{"stream":"while-down"}`); err == nil && status < 500 {
		t.Fatalf("create stream with the metastore down: %d %s, want a 5xx", status, out)
	}
	if status, doc, out = faultCall(t, ctl, "DELETE", ""); status != 200 || doc.Meta.Down {
		t.Fatalf("DELETE /faults: %d %s", status, out)
	}
	if status, out, err := call(p, "POST", "/v1/streams", `{"stream":"while-down"}`); err != nil || status != 201 {
		t.Fatalf("create stream after DELETE /faults: %d %s %v", status, out, err)
	}

	// Metastore slow: every call takes the latency (the fields given
	// change, the others stay).
	faultCall(t, ctl, "PUT", `{"meta":{"down":true}}`)
	if status, doc, out = faultCall(t, ctl, "PUT", `{"meta":{"latency_ms":400}}`); status != 200 || doc.Meta != (devfaults.Setting{LatencyMS: 400, Down: true}) {
		t.Fatalf("PUT meta latency: %d %s, want latency 400 and still down", status, out)
	}
	faultCall(t, ctl, "PUT", `{"meta":{"down":false}}`)
	start := time.Now()
	if status, out, err := call(p, "POST", "/v1/streams", `{"stream":"while-slow"}`); err != nil || status != 201 {
		t.Fatalf("create stream with a slow metastore: %d %s %v", status, out, err)
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("create stream with 400 ms of metastore latency took %v", took)
	}
	faultCall(t, ctl, "DELETE", "")

	// A black hole: down and hanging, as the state says.
	if status, doc, out = faultCall(t, ctl, "PUT", `{"buckets":{"express-a":{"down":true,"hang":true}}}`); status != 200 ||
		doc.Buckets["express-a"] != (devfaults.Setting{Down: true, Hang: true}) {
		t.Fatalf("PUT a hanging bucket: %d %s", status, out)
	}
	faultCall(t, ctl, "DELETE", "")

	// Every bucket down: appends do not ack; cleared, they do again.
	status, doc, out = faultCall(t, ctl, "PUT", `{"buckets":{"standard":{"down":true},"express-a":{"down":true},"express-b":{"down":true},"express-c":{"down":true}}}`)
	if status != 200 || !doc.Buckets["standard"].Down || !doc.Buckets["express-c"].Down || doc.Meta.Down {
		t.Fatalf("PUT buckets down: %d %s", status, out)
	}
	if status, err := appendWithin(p.url, "s1", 1500*time.Millisecond); err == nil && status == 200 {
		t.Fatal("an append acked with every bucket down")
	}
	if status, doc, out = faultCall(t, ctl, "DELETE", ""); status != 200 || doc.Buckets["standard"].Down {
		t.Fatalf("DELETE /faults: %d %s", status, out)
	}
	if err := poll.Wait(30*time.Second, func() error {
		if status, err := appendWithin(p.url, "s1", 5*time.Second); err != nil || status != 200 {
			return fmt.Errorf("%d %v", status, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("no append acked within 30 s of the buckets coming back (last: %v)\n%s", err, p.stderr)
	}

	for _, logged := range []string{"dev fault control: metastore", "dev fault control: bucket"} {
		if !strings.Contains(p.stderr.String(), logged) {
			t.Fatalf("no %q in the log\n%s", logged, p.stderr)
		}
	}
}
