package durable

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/durable/offsets"
)

// ttlCall sends one request with the given headers and returns the status
// and body.
// testClient has a transport of its own: an httptest server that closes
// (a parallel test's) closes http.DefaultTransport's idle connections, and
// a request about to reuse one fails ("HTTP/1.x transport connection
// broken: http: CloseIdleConnections called", a clean-clone run).
var testClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}

func ttlCall(t *testing.T, method, url string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Defect 7 (issue 26): a Stream-TTL of 9,223,372,037 s or more was
// accepted, the PUT's body acknowledged, and the stream gone at the next
// request (time.Duration(ttl)*time.Second wrapped negative or tiny). A
// TTL past MaxStreamTTLSecs is now refused with 400 and creates nothing;
// one at the maximum keeps the stream; −1 stays a 400.
func TestStreamTTLPastTheMaximumIsRefused(t *testing.T) {
	t.Parallel()
	s := startTestStar(t, testsvc.SQLite(t))
	for _, c := range []struct {
		ttl  string
		keep bool // else refused with 400
	}{
		{"1", true},
		{"604800", true},
		{"9223372036", true}, // MaxStreamTTLSecs
		{"9223372037", false},
		{"18446744074", false}, // × 1e9 ns wraps to 0.29 s
		{"9223372036854775807", false},
		{"18446744073709551615", false},
		{"18446744073709551616", false},
		{"-1", false},
	} {
		url := s.url + "/ttl/" + c.ttl
		code, body := ttlCall(t, http.MethodPut, url, map[string]string{"Content-Type": "text/plain", hStreamTTL: c.ttl}, "acknowledged")
		if !c.keep {
			if code != http.StatusBadRequest {
				t.Errorf("PUT with Stream-TTL %s: %d %s, want 400", c.ttl, code, body)
			}
			if code, _ := ttlCall(t, http.MethodHead, url, nil, ""); code != http.StatusNotFound {
				t.Errorf("Stream-TTL %s refused, but HEAD is %d, want 404 (nothing created)", c.ttl, code)
			}
			continue
		}
		if code != http.StatusCreated {
			t.Fatalf("PUT with Stream-TTL %s: %d %s, want 201", c.ttl, code, body)
		}
		if code, got := ttlCall(t, http.MethodGet, url+"?offset=-1", nil, ""); code != http.StatusOK || got != "acknowledged" {
			t.Errorf("Stream-TTL %s: GET after the PUT is %d %q, want 200 with the PUT's body", c.ttl, code, got)
		}
	}
}

// durableExtremes are the numbers each Durable Streams conversion is
// driven with: 0, 2^31, 2^53 and its neighbours (the producer numbers'
// bound), the wrap of seconds in a Duration, 2^62 (the old TTL bound),
// 2^63−1, 2^64−1.
var durableExtremes = []uint64{
	0, 1, 1 << 31, 1<<53 - 1, 1 << 53, 9_223_372_036, 9_223_372_037, 18_446_744_074,
	1 << 62, 1<<63 - 1, 1 << 63, 1<<64 - 2, 1<<64 - 1,
}

// Stream-TTL: a value the PUT takes is at most MaxStreamTTLSecs, and the
// stream's sliding window never wraps: whatever TTL a row holds (one
// stored before the bound was checked holds up to 2^62), the stream is
// expired exactly when the idle time reaches the TTL as a saturating
// Duration, so a longer TTL never expires earlier and none expires at
// once.
func FuzzStreamTTL(f *testing.F) {
	for _, n := range durableExtremes {
		for _, e := range durableExtremes {
			f.Add(strconv.FormatUint(n, 10), n, e)
		}
	}
	f.Add("-1", uint64(1), uint64(0))
	f.Add("00060", uint64(60), uint64(60))
	f.Fuzz(func(t *testing.T, hdr string, ttl, idleSecs uint64) {
		if n, ok := parseStreamTTL([]string{hdr}); ok && (n > MaxStreamTTLSecs || strconv.FormatUint(n, 10) != hdr) {
			t.Fatalf("Stream-TTL %q taken as %d (max %d)", hdr, n, MaxStreamTTLSecs)
		}
		created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		h := &Handler{started: created}
		now := created.Add(api.Seconds(idleSecs))
		row := streamRow{Incarnation: "i", HasTTL: true, TTLSecs: ttl, Created: created}
		got := h.expired("s", &row, now)
		if want := now.Sub(created) >= api.Seconds(ttl); got != want {
			t.Fatalf("TTL %d s, idle %v: expired %v, want %v", ttl, now.Sub(created), got, want)
		}
		if ttl > 0 && h.expired("s", &row, created) {
			t.Fatalf("TTL %d s expired at once", ttl)
		}
		longer := row
		longer.TTLSecs = api.AddSat(ttl, 1)
		if h.expired("s", &longer, now) && !got {
			t.Fatalf("TTL %d expired at idle %v but TTL %d did not", longer.TTLSecs, now.Sub(created), ttl)
		}
	})
}

// Stream-Expires-At: any RFC 3339 instant (years 0000–9999, any offset)
// is an instant, never a duration: a stream expires exactly from it on,
// and a later expiry never expires earlier.
func FuzzStreamExpiresAt(f *testing.F) {
	for _, s := range []string{"0000-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "2262-04-11T23:47:16.854775807Z",
		"2262-04-11T23:47:16.854775808Z", "9999-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00+23:59"} {
		f.Add(s, int64(0))
		f.Add(s, int64(math.MaxInt64))
		f.Add(s, int64(math.MinInt64))
	}
	f.Fuzz(func(t *testing.T, at string, nowUnix int64) {
		exp, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return // the PUT answers 400
		}
		now := time.Unix(nowUnix%(1<<40), 0)
		row := streamRow{ExpiresAt: at}
		got := (&Handler{started: now}).expired("s", &row, now)
		if got != !now.Before(exp) {
			t.Fatalf("Expires-At %s at %v: expired %v", at, now, got)
		}
		later := streamRow{ExpiresAt: exp.Add(time.Second).Format(time.RFC3339Nano)}
		if got2 := (&Handler{started: now}).expired("s", &later, now); got2 && !got {
			t.Fatalf("Expires-At %s expired at %v before %s did", later.ExpiresAt, now, at)
		}
	})
}

// Offsets, producer numbers and cursors: an offset is 16 digits (at most
// offsets.MaxSeq, so the read's +1 never wraps) and string order is seq order;
// a producer epoch or seq is at most 2^53−1 (so seq+1 never wraps); the
// next cursor is never below the client's, strictly above it unless the
// client's is 2^64−1 (it saturates there instead of wrapping to 0).
func FuzzDurableNumbers(f *testing.F) {
	for _, a := range durableExtremes {
		for _, b := range durableExtremes[:4] {
			f.Add(a, b, fmt.Sprintf("%016d_%016d", a%1e16, b))
		}
	}
	f.Add(uint64(0), uint64(0), "9999999999999999_9999999999999999")
	f.Add(uint64(0), uint64(0), "-1")
	f.Fuzz(func(t *testing.T, a, b uint64, off string) {
		if seq, ok := offsets.Parse(off); ok {
			if seq > offsets.MaxSeq+1 {
				t.Fatalf("offset %q read as %d", off, seq)
			}
			if other := offsets.Format(min(a, offsets.MaxSeq)); other < off {
				if s2, _ := offsets.Parse(other); s2 > seq {
					t.Fatalf("offset %q < %q but %d > %d", other, off, s2, seq)
				}
			}
		}
		for _, n := range []uint64{a, b} {
			s := strconv.FormatUint(n, 10)
			got, ok := parseUintStrict(s, maxSafeInt)
			if ok != (n <= maxSafeInt) || ok && got != n {
				t.Fatalf("producer number %s: %d %v", s, got, ok)
			}
			next, err := strconv.ParseUint(nextCursor(s), 10, 64)
			if err != nil || next < n || (next == n && n != math.MaxUint64) {
				t.Fatalf("client cursor %d: next %d %v, want above it", n, next, err)
			}
		}
	})
}
