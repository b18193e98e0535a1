package durable

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/subs"
	"github.com/starlog/starlog/star/durable/subs/signing"
)

// The handler's subscriptions (protocol §6–7) are star/durable/subs: this
// package imports it, never the other way. The handler routes the __ds
// control requests to it and tells it of every write; it sees the
// streams only through subs.Streams (subStreams below), served as a
// client's requests are. The names star/server and star/servecmd use
// stay here.

// Subscription defaults and the keys' timing (subs.DefaultSubscriptionAudit
// and signing's constants say what each is).
const (
	DefaultSubscriptionAudit = subs.DefaultSubscriptionAudit
	DefaultKeyRotation       = signing.DefaultKeyRotation
	MinKeyRotation           = signing.MinKeyRotation
	KeyReload                = signing.KeyReload
	KeyPublishLead           = signing.KeyPublishLead
	KeyRetain                = signing.KeyRetain
)

// KeyInfo describes one subscription key to an operator (no secrets).
type KeyInfo = signing.KeyInfo

// WithCredential returns ctx carrying the credential of the token the
// request authenticated with (star/server's fingerprint of it): a
// subscription the request creates keeps it, for TokenStands.
func WithCredential(ctx context.Context, credential string) context.Context {
	return subs.WithCredential(ctx, credential)
}

// Subscriptions is the handler's subscription driver.
func (h *Handler) Subscriptions() *subs.Manager { return h.subs }

// SelfAuthenticated reports whether a request authenticates itself
// rather than with an access token: the JWK Set (public) and the
// callback, ack and release of a wake (their bearer is the wake token the
// handler minted). star/server serves these without a principal.
func (h *Handler) SelfAuthenticated(r *http.Request) bool { return h.subs.SelfAuthenticated(r) }

// Basin is the basin that holds the protocol's streams and keys.
func (h *Handler) Basin() string { return h.basin }

// SubscriptionKeys lists the subscription keys the row holds now, without
// their secrets (star/server's operators' route). Errors are *api.Error.
func (h *Handler) SubscriptionKeys(ctx context.Context) ([]KeyInfo, error) { return h.subs.Keys(ctx) }

// RotateSubscriptionKeys adds a subscription key now and returns the keys
// (subs.Manager.RotateKeys). Errors are *api.Error.
func (h *Handler) RotateSubscriptionKeys(ctx context.Context, emergency bool) ([]KeyInfo, error) {
	return h.subs.RotateKeys(ctx, emergency)
}

// subStreams is the protocol as the subscriptions see it (subs.Streams):
// requests the handler serves itself as the server (internal), and the
// stream rows listed.
type subStreams struct{ h *Handler }

// Tail is a HEAD through the handler, so a stream another star leads is
// asked of that star and closure, expiry and deletion count as they do
// for clients.
func (s subStreams) Tail(ctx context.Context, name string) (uint64, bool, error) {
	res := s.h.internal(ctx, http.MethodHead, name, "", nil)
	switch {
	case res.Status == http.StatusOK:
		at, ok := offsets.Parse(res.Header.Get(hStreamNext))
		if !ok {
			return 0, false, api.Unavailable("the tail of %s is unreadable (%q)", name, res.Header.Get(hStreamNext))
		}
		return at, true, nil
	case res.Status == http.StatusNotFound || res.Status == http.StatusGone || res.Status == http.StatusBadRequest:
		return 0, false, nil // no such stream (deleted, expired, or not a valid name)
	default:
		return 0, false, api.Unavailable("the tail of %s did not answer (status %d)", name, res.Status)
	}
}

// Append is a POST through the handler: an ordinary, serialized append on
// the stream's leader.
func (s subStreams) Append(ctx context.Context, name, contentType string, body []byte) error {
	res := s.h.internal(ctx, http.MethodPost, name, contentType, body)
	if res.Status < 200 || res.Status > 299 {
		return fmt.Errorf("append to %s: status %d: %s", name, res.Status, strings.TrimSpace(string(res.Body)))
	}
	return nil
}

// keyEnd is past every string key with a given prefix (the largest code
// point), for range queries.
const keyEnd = "\U0010FFFF"

// Names lists the stream rows (rowKey) from prefix on, a page at a time.
func (s subStreams) Names(ctx context.Context, prefix string, f func(name string) bool) error {
	from := rowKey(s.h.basin, prefix).SK
	q := meta.Query{PK: rowKey(s.h.basin, "").PK, From: from, To: from + keyEnd, Limit: 256}
	for {
		pg, err := s.h.meta.Query(ctx, q)
		if err != nil {
			return err
		}
		for _, it := range pg.Items {
			if !f(strings.TrimPrefix(it.SK, rowKey("", "").SK)) {
				return nil
			}
		}
		if pg.Next == "" {
			return nil
		}
		q.PageToken = pg.Next
	}
}
