package sdk

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// Access tokens (S2's /v1/access-tokens). The types follow the names of
// S2's OpenAPI spec (AccessTokenInfo, AccessTokenScope, ResourceSet,
// PermittedOperationGroups, ReadWritePermissions, Operation) and their
// JSON fields; a nil pointer or slice is an absent field.

// Operation is one of S2's operation names, the entries of a scope's ops.
type Operation string

// S2's operations.
const (
	OpListBasins         Operation = "list-basins"
	OpCreateBasin        Operation = "create-basin"
	OpDeleteBasin        Operation = "delete-basin"
	OpReconfigureBasin   Operation = "reconfigure-basin"
	OpGetBasinConfig     Operation = "get-basin-config"
	OpIssueAccessToken   Operation = "issue-access-token"
	OpRevokeAccessToken  Operation = "revoke-access-token"
	OpListAccessTokens   Operation = "list-access-tokens"
	OpListStreams        Operation = "list-streams"
	OpCreateStream       Operation = "create-stream"
	OpDeleteStream       Operation = "delete-stream"
	OpGetStreamConfig    Operation = "get-stream-config"
	OpReconfigureStream  Operation = "reconfigure-stream"
	OpCheckTail          Operation = "check-tail"
	OpAppend             Operation = "append"
	OpRead               Operation = "read"
	OpTrim               Operation = "trim"
	OpFence              Operation = "fence"
	OpAccountMetrics     Operation = "account-metrics"
	OpBasinMetrics       Operation = "basin-metrics"
	OpStreamMetrics      Operation = "stream-metrics"
	OpListLocations      Operation = "list-locations"
	OpGetDefaultLocation Operation = "get-default-location"
	OpSetDefaultLocation Operation = "set-default-location"
)

// Operations lists every operation S2 defines, in its spec's order.
var Operations = []Operation{
	OpListBasins, OpCreateBasin, OpDeleteBasin, OpReconfigureBasin, OpGetBasinConfig,
	OpIssueAccessToken, OpRevokeAccessToken, OpListAccessTokens,
	OpListStreams, OpCreateStream, OpDeleteStream, OpGetStreamConfig, OpReconfigureStream,
	OpCheckTail, OpAppend, OpRead, OpTrim, OpFence,
	OpAccountMetrics, OpBasinMetrics, OpStreamMetrics,
	OpListLocations, OpGetDefaultLocation, OpSetDefaultLocation,
}

// ResourceSet is a set of basin, stream or token names: exactly one of
// Exact (one name; "" matches nothing) or Prefix (every name starting with
// it; "" matches everything).
type ResourceSet struct {
	Exact  *string `json:"exact,omitempty"`
	Prefix *string `json:"prefix,omitempty"`
}

// ExactSet is the set of one name.
func ExactSet(name string) *ResourceSet { return &ResourceSet{Exact: &name} }

// PrefixSet is the set of the names starting with p ("" for all).
func PrefixSet(p string) *ResourceSet { return &ResourceSet{Prefix: &p} }

// ReadWritePermissions are one operation group's permissions.
type ReadWritePermissions struct {
	Read  bool `json:"read,omitempty"`
	Write bool `json:"write,omitempty"`
}

// PermittedOperationGroups grants whole groups of operations: account
// (basins and tokens), basin (a basin's own config) and stream (streams
// and their records).
type PermittedOperationGroups struct {
	Account *ReadWritePermissions `json:"account,omitempty"`
	Basin   *ReadWritePermissions `json:"basin,omitempty"`
	Stream  *ReadWritePermissions `json:"stream,omitempty"`
}

// AccessTokenScope is what a token may do: the union of its operation
// groups and explicit operations, on the resources of its sets. An absent
// set matches nothing.
type AccessTokenScope struct {
	Basins       *ResourceSet              `json:"basins,omitempty"`
	Streams      *ResourceSet              `json:"streams,omitempty"`
	AccessTokens *ResourceSet              `json:"access_tokens,omitempty"`
	OpGroups     *PermittedOperationGroups `json:"op_groups,omitempty"`
	Ops          []Operation               `json:"ops,omitempty"`
}

// AccessTokenInfo describes a token: everything but its secret.
type AccessTokenInfo struct {
	ID string `json:"id"`
	// ExpiresAt, when set, is when the token stops working.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// AutoPrefixStreams: the token's stream names are relative to its
	// stream prefix (which the server adds to requests and strips from
	// responses).
	AutoPrefixStreams bool             `json:"auto_prefix_streams"`
	Scope             AccessTokenScope `json:"scope"`
}

// IssueAccessTokenRequest is the body of an issue: the new token's info.
// An unset ExpiresAt takes the issuing token's expiry; the new scope must
// lie within the issuer's.
type IssueAccessTokenRequest = AccessTokenInfo

// IssueAccessTokenResponse carries the new token, shown this once.
type IssueAccessTokenResponse struct {
	AccessToken string `json:"access_token"`
}

// ListAccessTokensResponse is one page of tokens.
type ListAccessTokensResponse struct {
	AccessTokens []AccessTokenInfo `json:"access_tokens"`
	HasMore      bool              `json:"has_more"`
}

// IssueAccessToken issues a token and returns it (the server keeps only
// its hash: it cannot be shown again). It is retried only after a definite
// failure: a retry after an attempt that may have been applied could only
// get 409 resource_already_exists, the secret lost.
func (c *Client) IssueAccessToken(ctx context.Context, req IssueAccessTokenRequest) (string, error) {
	var out IssueAccessTokenResponse
	_, err := c.doJSON(ctx, &request{method: http.MethodPost, path: "/access-tokens"}, definiteOnly, req, &out)
	if err != nil {
		return "", err
	}
	if out.AccessToken == "" {
		return "", &ProtocolError{Msg: "issue access token: the response holds no token"}
	}
	return out.AccessToken, nil
}

// ListAccessTokens returns one page of the tokens the caller's scope may
// see (prefix, start_after, limit).
func (c *Client) ListAccessTokens(ctx context.Context, req api.ListRequest) (ListAccessTokensResponse, error) {
	var out ListAccessTokensResponse
	_, err := c.doJSON(ctx, &request{method: http.MethodGet, path: "/access-tokens", query: req.Query()}, idempotent, nil, &out)
	return out, err
}

// AllAccessTokens iterates over every visible token whose id starts with
// req.Prefix and sorts after req.StartAfter, fetching pages of req.Limit
// (0: the server's 1000) as it goes. It stops at the first error, which it
// yields.
func (c *Client) AllAccessTokens(ctx context.Context, req api.ListRequest) iter.Seq2[AccessTokenInfo, error] {
	return func(yield func(AccessTokenInfo, error) bool) {
		for {
			page, err := c.ListAccessTokens(ctx, req)
			if err != nil {
				yield(AccessTokenInfo{}, err)
				return
			}
			for _, t := range page.AccessTokens {
				if !yield(t, nil) {
					return
				}
			}
			if !page.HasMore || len(page.AccessTokens) == 0 {
				return
			}
			last := page.AccessTokens[len(page.AccessTokens)-1].ID
			if last <= req.StartAfter {
				// A page must move forward: otherwise the loop never ends.
				yield(AccessTokenInfo{}, &ProtocolError{Msg: fmt.Sprintf("list access tokens: a page after %q ends at %q", req.StartAfter, last)})
				return
			}
			req.StartAfter = last
		}
	}
}

// RevokeAccessToken revokes a token (404 access_token_not_found if there is
// none with that id). A server honours a revocation within its stated
// bound (a star: at once on the star that revoked, within about 2 s on
// the others; docs/security.md). A retry after an attempt that was applied gets the 404.
func (c *Client) RevokeAccessToken(ctx context.Context, id string) error {
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: "/access-tokens/" + url.PathEscape(id)}, idempotent)
	return err
}
