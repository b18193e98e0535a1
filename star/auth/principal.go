package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// Error codes of authentication and authorization failures (S2's).
const (
	// CodeAuthn (401): no token, or one that is unknown, malformed,
	// expired or revoked.
	CodeAuthn = "authn"
	// CodePermissionDenied (403): a valid token whose scope does not
	// allow the request.
	CodePermissionDenied = api.CodePermissionDenied
	// CodeAccessTokenNotFound (404): revoking an id that has no token.
	CodeAccessTokenNotFound = "access_token_not_found"
)

// Unauthenticated is the 401 authn error.
func Unauthenticated(format string, args ...any) *api.Error {
	return &api.Error{Status: http.StatusUnauthorized, Code: CodeAuthn, Message: fmt.Sprintf(format, args...)}
}

// Denied is the 403 permission_denied error.
func Denied(format string, args ...any) *api.Error {
	return &api.Error{Status: http.StatusForbidden, Code: CodePermissionDenied, Message: fmt.Sprintf(format, args...)}
}

// Info is what a token is (S2's AccessTokenInfo): everything but its secret.
type Info struct {
	ID                string     `json:"id"`
	ExpiresAt         *time.Time `json:"expires_at,omitempty"`
	AutoPrefixStreams bool       `json:"auto_prefix_streams"`
	Scope             Scope      `json:"scope"`
}

// Expired reports whether the token has expired at now.
func (i Info) Expired(now time.Time) bool { return i.ExpiresAt != nil && !now.Before(*i.ExpiresAt) }

// Principal is who a request acts for: a token that authenticated, or the
// admin (the bootstrap token, or every request of an open star).
type Principal struct {
	Info
	// Admin is the bootstrap admin token (full scope, never expires, not
	// stored). It issues the first tokens.
	Admin bool
}

// AdminPrincipal is the admin's principal.
func AdminPrincipal() Principal {
	return Principal{Info: Info{ID: "admin", Scope: FullScope()}, Admin: true}
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal of ctx; a context without one gets a
// principal with the empty scope, which allows nothing.
func FromContext(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// Request is one operation on one resource: Basin for basin and stream
// operations, Stream for stream operations, TokenID for token ones. A
// listing names no resource (its results are filtered by the scope).
type Request struct {
	Op      Op
	Basin   string
	Stream  string
	TokenID string
}

// Authorize reports whether p may do req: nil, or a 403.
func (p Principal) Authorize(req Request) *api.Error {
	if !p.Scope.Allows(req.Op) {
		return Denied("operation %s is not allowed by access token %q", req.Op, truncate(p.ID, 96))
	}
	switch req.Op {
	case ListBasins, ListAccessTokens, AccountMetrics, ListLocations, GetDefaultLocation, SetDefaultLocation:
		return nil // account-wide: listings are filtered by the scope
	case IssueAccessToken, RevokeAccessToken:
		if !p.Scope.AccessTokens.Contains(req.TokenID) {
			return Denied("access token id %q is outside the scope of access token %q", truncate(req.TokenID, 96), truncate(p.ID, 96))
		}
		return nil
	}
	if !p.Scope.Basins.Contains(req.Basin) {
		return Denied("basin %q is outside the scope of access token %q", req.Basin, truncate(p.ID, 96))
	}
	if g, _ := GroupOf(req.Op); g != GroupStream || req.Op == ListStreams {
		return nil
	}
	if !p.Scope.Streams.Contains(req.Stream) {
		return Denied("stream %q is outside the scope of access token %q", truncate(p.ClientStream(req.Stream), 128), truncate(p.ID, 96))
	}
	return nil
}

// streamPrefix is the prefix auto_prefix_streams adds, "" when off.
func (p Principal) streamPrefix() string {
	if p.AutoPrefixStreams && p.Scope.Streams.Prefix {
		return p.Scope.Streams.Value
	}
	return ""
}

// StreamName maps a stream name as the client sent it to the stored name:
// with auto_prefix_streams the scope's prefix is prepended.
func (p Principal) StreamName(client string) string { return p.streamPrefix() + client }

// ClientStream maps a stored stream name back to the client's view (the
// prefix stripped); names outside the prefix are returned unchanged.
func (p Principal) ClientStream(stored string) string {
	return strings.TrimPrefix(stored, p.streamPrefix())
}

// ClientMessage rewrites an error message that names the stored stream so
// it names the client's, as S2 strips the prefix from responses.
func (p Principal) ClientMessage(msg, stored string) string {
	pre := p.streamPrefix()
	if pre == "" || stored == "" {
		return msg
	}
	return strings.ReplaceAll(msg, stored, p.ClientStream(stored))
}

// IssueRequest is S2's IssueAccessTokenRequest.
type IssueRequest struct {
	ID                string     `json:"id"`
	ExpiresAt         *time.Time `json:"expires_at"`
	AutoPrefixStreams bool       `json:"auto_prefix_streams"`
	Scope             Scope      `json:"scope"`
}

// ParseIssueRequest decodes and validates an issue request body: 400
// bad_json for JSON that does not decode into the request, 422 invalid
// for values S2 refuses.
func ParseIssueRequest(body []byte) (IssueRequest, *api.Error) {
	var w struct {
		ID                *string         `json:"id"`
		ExpiresAt         *time.Time      `json:"expires_at"`
		AutoPrefixStreams *bool           `json:"auto_prefix_streams"`
		Scope             json.RawMessage `json:"scope"`
	}
	if err := strictUnmarshal(body, &w); err != nil {
		return IssueRequest{}, api.BadJSON("issue access token request: %v", err)
	}
	if w.ID == nil {
		return IssueRequest{}, api.BadJSON("issue access token request: missing id")
	}
	if len(w.Scope) == 0 || string(w.Scope) == "null" {
		return IssueRequest{}, api.BadJSON("issue access token request: missing scope")
	}
	req := IssueRequest{ID: *w.ID, ExpiresAt: w.ExpiresAt, AutoPrefixStreams: w.AutoPrefixStreams != nil && *w.AutoPrefixStreams}
	if err := json.Unmarshal(w.Scope, &req.Scope); err != nil {
		return IssueRequest{}, api.BadJSON("issue access token request: scope: %v", err)
	}
	if err := ValidateTokenID(req.ID); err != nil {
		return IssueRequest{}, err
	}
	if err := req.Scope.Validate(); err != nil {
		return IssueRequest{}, err
	}
	if req.AutoPrefixStreams && !req.Scope.Streams.Prefix {
		return IssueRequest{}, api.Invalid("auto_prefix_streams needs a prefix stream scope")
	}
	if req.ExpiresAt != nil {
		t := req.ExpiresAt.UTC()
		req.ExpiresAt = &t
	}
	return req, nil
}

// Issue checks that p may issue req at now and returns the new token's
// info. The rule (S2's): the new token's id is in p's access_tokens set,
// each of its resource sets lies within p's, its operations are among p's,
// and it expires no later than p (an unset expiry takes p's).
func (p Principal) Issue(req IssueRequest, now time.Time) (Info, *api.Error) {
	if err := p.Authorize(Request{Op: IssueAccessToken, TokenID: req.ID}); err != nil {
		return Info{}, err
	}
	info := Info{ID: req.ID, ExpiresAt: req.ExpiresAt, AutoPrefixStreams: req.AutoPrefixStreams, Scope: req.Scope}
	if p.ExpiresAt != nil {
		if info.ExpiresAt == nil {
			t := *p.ExpiresAt
			info.ExpiresAt = &t
		} else if info.ExpiresAt.After(*p.ExpiresAt) {
			return Info{}, Denied("expires_at %s is after the issuing token's expiry %s", info.ExpiresAt.Format(time.RFC3339), p.ExpiresAt.Format(time.RFC3339))
		}
	}
	if info.ExpiresAt != nil && !info.ExpiresAt.After(now) {
		return Info{}, api.Invalid("expires_at %s is not in the future", info.ExpiresAt.Format(time.RFC3339))
	}
	for _, c := range []struct {
		name          string
		child, parent ResourceSet
	}{
		{"basins", req.Scope.Basins, p.Scope.Basins},
		{"streams", req.Scope.Streams, p.Scope.Streams},
		{"access_tokens", req.Scope.AccessTokens, p.Scope.AccessTokens},
	} {
		if !c.child.Within(c.parent) {
			return Info{}, Denied("scope.%s is wider than the issuing token's", c.name)
		}
	}
	for _, o := range AllOps {
		if info.Scope.Allows(o) && !p.Scope.Allows(o) {
			return Info{}, Denied("operation %s is not allowed to the issuing token", o)
		}
	}
	return info, nil
}

// AuthorizeOp is the check of a request whose resource is named in its
// body, made before the body is read: the operation, and for a stream the
// basin. Authorize then checks the resource once the body is decoded.
func (p Principal) AuthorizeOp(req Request) *api.Error {
	if !p.Scope.Allows(req.Op) {
		return Denied("operation %s is not allowed by access token %q", req.Op, truncate(p.ID, 96))
	}
	if g, _ := GroupOf(req.Op); g == GroupStream && !p.Scope.Basins.Contains(req.Basin) {
		return Denied("basin %q is outside the scope of access token %q", req.Basin, truncate(p.ID, 96))
	}
	return nil
}
