package sdk

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
)

// TestAccessTokensAgainstStar: the admin token issues a scoped token with
// auto-prefixed streams, the scoped token works within its scope and is
// refused outside it, listings page, and a revoked token is refused with
// 401 within the bound the docs state (5 s).
func TestAccessTokensAgainstStar(t *testing.T) {
	endpoint := startStar(t)
	ctx := testCtx(t)
	admin := starClient(t, endpoint, starAdminToken, nil)
	const basin = "starlog-dev"

	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	tok, err := admin.IssueAccessToken(ctx, IssueAccessTokenRequest{
		ID:                "app-writer",
		ExpiresAt:         &expires,
		AutoPrefixStreams: true,
		Scope: AccessTokenScope{
			Basins:   ExactSet(basin),
			Streams:  PrefixSet("app/"),
			OpGroups: &PermittedOperationGroups{Stream: &ReadWritePermissions{Read: true, Write: true}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if tok == "" || tok == starAdminToken {
		t.Fatalf("issued token %q", tok)
	}
	// The same id again is 409, and nothing retried it.
	_, err = admin.IssueAccessToken(ctx, IssueAccessTokenRequest{ID: "app-writer", Scope: AccessTokenScope{Ops: []Operation{OpRead}}})
	if ae := (*api.Error)(nil); !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != api.CodeResourceAlreadyExists {
		t.Fatalf("issue a taken id: %v", err)
	}

	scoped := starClient(t, endpoint, tok, nil)
	s := scoped.Basin(basin).Stream("events")
	if _, err := s.Append(ctx, &api.AppendInput{Records: textRecords("a", "b")}); err != nil {
		t.Fatalf("append with the scoped token: %v", err)
	}
	got, err := s.Read(ctx, api.ReadRequest{From: api.FromSeqNum})
	if err != nil {
		t.Fatalf("read with the scoped token: %v", err)
	}
	if len(got.Records) != 2 {
		t.Fatalf("read with the scoped token: %d records", len(got.Records))
	}
	// Stored under the prefix (the admin sees it), named without it by the
	// scoped token.
	if _, err := admin.Basin(basin).GetStreamConfig(ctx, "app/events"); err != nil {
		t.Fatalf("the admin's view of app/events: %v", err)
	}
	page, err := scoped.Basin(basin).ListStreams(ctx, api.ListRequest{})
	if err != nil || len(page.Streams) != 1 || page.Streams[0].Name != "events" {
		t.Fatalf("scoped listing: %+v %v", page, err)
	}
	// Out of scope: another basin's operations, and account operations.
	if _, err := scoped.ListBasins(ctx, api.ListRequest{}); !isStatus(err, http.StatusForbidden, api.CodePermissionDenied) {
		t.Fatalf("list basins with a stream token: %v", err)
	}
	if _, err := scoped.IssueAccessToken(ctx, IssueAccessTokenRequest{ID: "x", Scope: AccessTokenScope{}}); !isStatus(err, http.StatusForbidden, api.CodePermissionDenied) {
		t.Fatalf("issue with a stream token: %v", err)
	}

	// Listing: prefix, start_after, limit and paging.
	for _, id := range []string{"app-reader-1", "app-reader-2", "app-reader-3", "other"} {
		if _, err := admin.IssueAccessToken(ctx, IssueAccessTokenRequest{ID: id,
			Scope: AccessTokenScope{Basins: ExactSet(basin), Streams: PrefixSet(""), Ops: []Operation{OpRead}}}); err != nil {
			t.Fatal(err)
		}
	}
	pg, err := admin.ListAccessTokens(ctx, api.ListRequest{Prefix: "app-", Limit: 2})
	if err != nil || len(pg.AccessTokens) != 2 || !pg.HasMore || pg.AccessTokens[0].ID != "app-reader-1" {
		t.Fatalf("first page: %+v %v", pg, err)
	}
	pg, err = admin.ListAccessTokens(ctx, api.ListRequest{Prefix: "app-", StartAfter: "app-reader-2", Limit: 2})
	if err != nil || len(pg.AccessTokens) != 2 || pg.HasMore || pg.AccessTokens[0].ID != "app-reader-3" || pg.AccessTokens[1].ID != "app-writer" {
		t.Fatalf("second page: %+v %v", pg, err)
	}
	w := pg.AccessTokens[1]
	if !w.AutoPrefixStreams || w.ExpiresAt == nil || !w.ExpiresAt.Equal(expires) || w.Scope.Streams == nil ||
		w.Scope.Streams.Prefix == nil || *w.Scope.Streams.Prefix != "app/" || w.Scope.OpGroups == nil ||
		w.Scope.OpGroups.Stream == nil || !w.Scope.OpGroups.Stream.Write {
		t.Fatalf("app-writer's info: %+v", w)
	}
	var ids []string
	for info, err := range admin.AllAccessTokens(ctx, api.ListRequest{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	if want := []string{"app-reader-1", "app-reader-2", "app-reader-3", "app-writer", "other"}; !slices.Equal(ids, want) {
		t.Fatalf("all tokens: %v, want %v", ids, want)
	}

	// Revoke: 401 within the stated bound; a second revoke is 404.
	if err := admin.RevokeAccessToken(ctx, "app-writer"); err != nil {
		t.Fatal(err)
	}
	poll.UntilErr(t, 5*time.Second, "a 401 for the revoked token", func() error {
		_, err := s.CheckTail(ctx)
		if isStatus(err, http.StatusUnauthorized, "authn") {
			return nil
		}
		return fmt.Errorf("check-tail: %v", err)
	})
	if err := admin.RevokeAccessToken(ctx, "app-writer"); !isStatus(err, http.StatusNotFound, "access_token_not_found") {
		t.Fatalf("revoke twice: %v", err)
	}
}

func isStatus(err error, status int, code string) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Status == status && ae.Code == code
}

// TestRevocationAcrossStarsSDK: a token issued and revoked through one
// star of a two-star star dev cluster is refused by the other within the
// bound docs/security.md states (2 s of cache plus one metastore read;
// the issue's bound is 5 s).
func TestRevocationAcrossStarsSDK(t *testing.T) {
	a := startStar(t, "--stars", "2")
	u, err := url.Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	b := "http://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(port+1))
	ctx := testCtx(t)
	admin := starClient(t, a, starAdminToken, nil)
	tok, err := admin.IssueAccessToken(ctx, IssueAccessTokenRequest{ID: "across",
		Scope: AccessTokenScope{Basins: ExactSet("starlog-dev"), Streams: PrefixSet(""), Ops: []Operation{OpCheckTail, OpRead}}})
	if err != nil {
		t.Fatal(err)
	}
	other := starClient(t, b, tok, func(c *Config) {
		c.Retry = RetryPolicy{MaxAttempts: 20, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
	})
	s := other.Basin("starlog-dev").Stream("across")
	if _, err := s.CheckTail(ctx); err != nil {
		t.Fatalf("the token on the other star: %v", err)
	}
	if err := admin.RevokeAccessToken(ctx, "across"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	poll.Until(t, 5*time.Second, "the other star to refuse the revoked token", func() bool {
		_, err := s.CheckTail(ctx)
		if isStatus(err, http.StatusUnauthorized, "authn") {
			return true
		}
		if err != nil {
			t.Fatalf("check-tail after the revocation: %v", err)
		}
		return false
	})
	t.Logf("revocation honoured by the other star after %v", time.Since(start))
}
