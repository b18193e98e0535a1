package subs

import (
	"context"
	"net/http"
	"strings"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
)

// Who may do what with a subscription (docs/durable-streams.md,
// "Authorization"). A subscription is authorized against every stream it
// names or links, with the stream scope of the token, as the S2 face
// authorizes a stream: reading its links' tails and cursors needs read on
// each, its pattern may reach only streams of the scope, and its wake
// events are appends to the wake stream. It acts as the token that
// created it (subCreator), never as the server.

// subCreator is the token that created a subscription, as its row keeps
// it: the subscription links only streams this scope may read, and its
// wakes stand only while the token does (Config.TokenStands).
type subCreator struct {
	TokenID string `json:"token_id"`
	// Admin is the bootstrap admin (or an open star): it never ends.
	Admin bool `json:"admin,omitempty"`
	// Credential names the token among the ones ever issued under its id
	// (star/server's fingerprint of it): a token revoked and issued again
	// under the id is another token.
	Credential string     `json:"credential,omitempty"`
	Scope      auth.Scope `json:"scope"`
}

// creatorOf is the subscription's creator: the request's principal.
func creatorOf(ctx context.Context) *subCreator {
	p := auth.FromContext(ctx)
	return &subCreator{TokenID: p.ID, Admin: p.Admin, Credential: credentialFrom(ctx), Scope: p.Scope}
}

// allows reports whether the creator's scope allows op on the stored
// stream name (the basin is the handler's, checked at creation). A row
// written before subscriptions kept their creator has none: it acts as
// it did, with the authority it was created under.
func (c *subCreator) allows(op auth.Op, name string) bool {
	if c == nil || c.Admin {
		return true
	}
	return c.Scope.Allows(op) && c.Scope.Streams.Contains(name)
}

type credentialKey struct{}

// WithCredential returns ctx carrying the credential of the token the
// request authenticated with (star/server's fingerprint of it): a
// subscription the request creates keeps it, for TokenStands.
func WithCredential(ctx context.Context, credential string) context.Context {
	return context.WithValue(ctx, credentialKey{}, credential)
}

func credentialFrom(ctx context.Context) string {
	c, _ := ctx.Value(credentialKey{}).(string)
	return c
}

// denied is a refusal of the control API.
func denied(aerr *api.Error) *subError {
	return &subError{Status: aerr.Status, Code: "PERMISSION_DENIED", Message: aerr.Message}
}

// nilIfOK returns a refusal as an error, and no refusal as a nil error
// (not a nil *subError in a non-nil interface).
func nilIfOK(e *subError) error {
	if e == nil {
		return nil
	}
	return e
}

// authorizeStream checks op on a stored stream name.
func (m *Manager) authorizeStream(p auth.Principal, op auth.Op, name string) *subError {
	if aerr := p.Authorize(auth.Request{Op: op, Basin: m.basin, Stream: name}); aerr != nil {
		return denied(aerr)
	}
	return nil
}

// patternReach is the stored names a pattern under root may link: exact
// (no wildcard) the one name, else every name with the prefix. The
// prefix is the literal segments before the first wildcard and the
// separator after them, so "room/**" reaches "room/…"; the name "room",
// which it matches too, is linked only for a creator whose scope holds it.
func patternReach(root, pattern string) (name string, exact bool) {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		if s == "*" || s == "**" {
			if i == 0 {
				return root, false
			}
			return root + strings.Join(segs[:i], "/") + "/", false
		}
	}
	return root + pattern, true
}

// authorizeConfig checks what creating a subscription under root with
// cfg needs: read on every explicit stream and on every name the pattern
// reaches (a prefix set within the token's), and append on the wake
// stream (the subscription appends its wake events as its creator).
func (m *Manager) authorizeConfig(p auth.Principal, root string, cfg *subConfig) *subError {
	for _, s := range cfg.Streams {
		if err := m.authorizeStream(p, auth.Read, root+s); err != nil {
			return err
		}
	}
	if cfg.Pattern != "" {
		name, exact := patternReach(root, cfg.Pattern)
		if exact {
			if err := m.authorizeStream(p, auth.Read, name); err != nil {
				return err
			}
		} else if aerr := p.AuthorizeOp(auth.Request{Op: auth.Read, Basin: m.basin}); aerr != nil {
			return denied(aerr)
		} else if !auth.PrefixSet(name).Within(p.Scope.Streams) {
			return denied(auth.Denied("pattern %q can match streams outside the scope of access token %q",
				p.ClientStream(root)+cfg.Pattern, p.ID))
		}
	}
	if cfg.WakeStream != "" {
		if err := m.authorizeStream(p, auth.Append, root+cfg.WakeStream); err != nil {
			return err
		}
	}
	return nil
}

// authorizeSub checks that p may act on the subscription as it stands:
// what creating it would need, and read on every link (a link added
// since, or discovered by the pattern). A token acts on a subscription
// whole or not at all, so no answer shows a name outside its scope.
func (m *Manager) authorizeSub(p auth.Principal, s *subRow) *subError {
	if err := m.authorizeConfig(p, s.Root, &s.Config); err != nil {
		return err
	}
	for i := range s.Links {
		if err := m.authorizeStream(p, auth.Read, s.Root+s.Links[i].Path); err != nil {
			return err
		}
	}
	return nil
}

// authorizeLink checks that p may link a stored name to s: p may read it,
// and so may the subscription's creator (it acts as the creator).
func (m *Manager) authorizeLink(p auth.Principal, s *subRow, name string) *subError {
	if err := m.authorizeStream(p, auth.Read, name); err != nil {
		return err
	}
	if !s.Creator.allows(auth.Read, name) {
		return &subError{Status: http.StatusForbidden, Code: "PERMISSION_DENIED",
			Message: "stream " + p.ClientStream(name) + " is outside the scope of the token that created the subscription"}
	}
	return nil
}

// authorizeClaim checks that p may hold a pull-wake subscription's wake:
// read on the wake stream (the worker consumes it) and on every link (a
// claim shows their tails, and its token acks their cursors).
func (m *Manager) authorizeClaim(p auth.Principal, s *subRow) *subError {
	if s.Config.Type == subPullWake {
		if err := m.authorizeStream(p, auth.Read, s.Root+s.Config.WakeStream); err != nil {
			return err
		}
	}
	for i := range s.Links {
		if err := m.authorizeStream(p, auth.Read, s.Root+s.Links[i].Path); err != nil {
			return err
		}
	}
	return nil
}

// authorizeAcks checks a pull-wake worker's acks against the streams its
// token could read when it claimed (a link added since may be outside
// them). A wake claimed before claims kept the set acks as it did.
func (s *subRow) authorizeAcks(acks []ackReq) *subError {
	if s.HolderStreams == nil {
		return nil
	}
	for _, a := range acks {
		p := normPath(a.Stream)
		if p == "" {
			p = normPath(a.Path)
		}
		if !s.HolderStreams.Contains(s.Root + p) {
			return &subError{Status: http.StatusForbidden, Code: "PERMISSION_DENIED",
				Message: "an ack names a stream outside the scope of the token that claimed the wake: " + p}
		}
	}
	return nil
}

// creatorStands reports whether the subscription may act now: its
// creator's token still exists (not revoked, not expired) and allows the
// wake's append. A row without a creator, the admin's, and a handler
// without a token store (an open star's) always may.
func (m *Manager) creatorStands(ctx context.Context, s *subRow) (bool, error) {
	c := s.Creator
	if c == nil || c.Admin {
		return true, nil
	}
	if s.Config.Type == subPullWake && !c.allows(auth.Append, s.Root+s.Config.WakeStream) {
		return false, nil
	}
	if m.tokenStands == nil {
		return true, nil
	}
	if c.Credential == "" {
		return false, nil
	}
	return m.tokenStands(ctx, c.TokenID, c.Credential)
}

// holderStands reports whether the access token that claimed s's wake
// still stands (not revoked, not expired): checked on every ack, so a
// revoked worker's lease ends at its next ack instead of lasting on. A
// claim by the admin or on an open star has no token to check.
func (m *Manager) holderStands(ctx context.Context, s *subRow) (bool, error) {
	if s.HolderCredential == "" || m.tokenStands == nil {
		return true, nil
	}
	return m.tokenStands(ctx, s.HolderToken, s.HolderCredential)
}
