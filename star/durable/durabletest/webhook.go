// Package durabletest holds what tests of Durable Streams and its
// subscriptions share: a webhook receiver on loopback and a check of the
// signatures it receives, written the way a worker's receiver would be,
// and a real node to serve the handler from (node.go).
package durabletest

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Webhook receives subscription wakes: it answers {} (the wake then waits
// for a callback) and hands each delivery to the test.
type Webhook struct {
	URL  string
	reqs chan Delivery
}

// Delivery is one webhook POST: its body and Webhook-Signature header.
type Delivery struct {
	Body      []byte
	Signature string
}

// NewWebhook starts a receiver, closed when the test ends.
func NewWebhook(t testing.TB) *Webhook {
	h := &Webhook{reqs: make(chan Delivery, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case h.reqs <- Delivery{b, r.Header.Get("Webhook-Signature")}:
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	return h
}

// Next is the next delivery, within d.
func (h *Webhook) Next(t testing.TB, d time.Duration) Delivery {
	t.Helper()
	select {
	case r := <-h.reqs:
		return r
	case <-time.After(d):
		t.Fatalf("no webhook delivery within %v", d)
		return Delivery{}
	}
}

// Quiet fails the test if a delivery arrives within d.
func (h *Webhook) Quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case r := <-h.reqs:
		t.Fatalf("unexpected webhook delivery: %s", r.Body)
	case <-time.After(d):
	}
}

// Drop discards the deliveries received so far.
func (h *Webhook) Drop() {
	for {
		select {
		case <-h.reqs:
		default:
			return
		}
	}
}

// Kid is the key id the signature names.
func (d Delivery) Kid() string {
	for _, part := range strings.Split(d.Signature, ",") {
		if v, ok := strings.CutPrefix(part, "kid="); ok {
			return v
		}
	}
	return ""
}

// Verify checks the signature as a receiver does (protocol §6.5):
// "t=<unix s>,kid=<kid>,ed25519=<base64url>" over "<t>.<body>" with pub,
// and t within skew of now.
func (d Delivery) Verify(pub ed25519.PublicKey, skew time.Duration) bool {
	var ts, sig string
	for _, part := range strings.Split(d.Signature, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "ed25519":
			sig = v
		}
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(n, 0)).Abs() > skew {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	return err == nil && ed25519.Verify(pub, append([]byte(ts+"."), d.Body...), raw)
}

// Wake is a webhook delivery's body (protocol §7.1).
type Wake struct {
	SubscriptionID string `json:"subscription_id"`
	WakeID         string `json:"wake_id"`
	Generation     uint64 `json:"generation"`
	CallbackURL    string `json:"callback_url"`
	Token          string `json:"callback_token"`
	Streams        []struct {
		Path       string `json:"path"`
		TailOffset string `json:"tail_offset"`
		HasPending bool   `json:"has_pending"`
	} `json:"streams"`
}

// Wake decodes the delivery's body.
func (d Delivery) Wake(t testing.TB) Wake {
	t.Helper()
	var w Wake
	if err := json.Unmarshal(d.Body, &w); err != nil {
		t.Fatalf("wake body %s: %v", d.Body, err)
	}
	return w
}

// Pending is the paths of the streams the wake says have pending records.
func (w *Wake) Pending() []string {
	var out []string
	for _, s := range w.Streams {
		if s.HasPending {
			out = append(out, s.Path)
		}
	}
	return out
}

// Tail is the tail offset the wake gives for path ("" if none).
func (w *Wake) Tail(path string) string {
	for _, s := range w.Streams {
		if s.Path == path {
			return s.TailOffset
		}
	}
	return ""
}

// CallbackPath is the path of the wake's callback URL, for sending it to
// any star.
func (w *Wake) CallbackPath() string {
	if i := strings.Index(w.CallbackURL, "://"); i >= 0 {
		rest := w.CallbackURL[i+3:]
		if j := strings.Index(rest, "/"); j >= 0 {
			return rest[j:]
		}
	}
	return w.CallbackURL
}
