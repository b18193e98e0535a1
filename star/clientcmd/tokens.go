package clientcmd

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

func (c *conn) tokensCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Manage access tokens (issue, list, revoke)",
		Long: `Manage S2 access tokens. Every request to a star carries a bearer token
(--token or S2_ACCESS_TOKEN); the admin token (star dev prints it in its
banner, a production star reads it from --admin-token-file or a secret)
may do everything and issues the first tokens. A token may issue others
only within its own scope, expiring no later than itself.

A scope is what a token may do:
  resources   which basins, streams and token ids it may touch, each an
              exact name or a prefix ("" as a prefix: all); a set left
              out matches nothing
  op groups   read and/or write on whole groups of operations: account
              (list/create/delete basins, tokens), basin (a basin's own
              config) and stream (streams, their config and records)
  ops         single operations on top of the groups (append, read,
              check-tail, create-stream, list-streams, ...)

The server keeps only a keyed hash of each token: issue prints the token
once, and a lost token cannot be shown again (revoke it, issue another).
A revocation is honoured at once by the star that revoked and within
about 2 s (a token cache's lifetime plus one metastore read) by the others.`,
		Example: `  # A token that appends to and reads the streams under app/ of basin
  # starlog-dev, seeing them without the prefix, for 30 days:
  star tokens issue app-writer --basins-exact starlog-dev --streams-prefix app/ \
      --op-groups stream=rw --auto-prefix-streams --expires-in 30d

  # A read-only token for every stream of every basin:
  star tokens issue reader --basins-prefix "" --streams-prefix "" --ops read,check-tail

  star tokens list --prefix app-
  star tokens revoke app-writer`,
	}
	cmd.AddCommand(c.tokensIssueCmd(), c.tokensListCmd(), c.tokensRevokeCmd())
	return cmd
}

// scopeFlags are the flags of a token's scope.
type scopeFlags struct {
	basinsExact, basinsPrefix   string
	streamsExact, streamsPrefix string
	tokensExact, tokensPrefix   string
	opGroups                    string
	ops                         []string
	expiresIn, expiresAt        string
	autoPrefix                  bool
}

func (f *scopeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.basinsExact, "basins-exact", "", "the one basin the token may use")
	fs.StringVar(&f.basinsPrefix, "basins-prefix", "", `the basins whose name starts with this ("" for all)`)
	fs.StringVar(&f.streamsExact, "streams-exact", "", "the one stream the token may use")
	fs.StringVar(&f.streamsPrefix, "streams-prefix", "", `the streams whose name starts with this ("" for all)`)
	fs.StringVar(&f.tokensExact, "access-tokens-exact", "", "the one token id the token may issue or revoke")
	fs.StringVar(&f.tokensPrefix, "access-tokens-prefix", "", `the token ids starting with this that the token may issue, list or revoke ("" for all)`)
	fs.StringVar(&f.opGroups, "op-groups", "", `operation groups and their permissions, e.g. "account=r,basin=rw,stream=w" (r read, w write)`)
	fs.StringSliceVar(&f.ops, "ops", nil, "operations allowed besides the groups, comma-separated: "+opNames())
	fs.StringVar(&f.expiresIn, "expires-in", "", "expire this long from now: a duration like 12h, 30d or 2w (default: the issuing token's expiry)")
	fs.StringVar(&f.expiresAt, "expires-at", "", "expire at this RFC 3339 time, e.g. 2027-01-31T00:00:00Z")
	fs.BoolVar(&f.autoPrefix, "auto-prefix-streams", false, "stream names the token sends and sees are relative to --streams-prefix (which the server adds and strips)")
}

func opNames() string {
	names := make([]string, len(sdk.Operations))
	for i, o := range sdk.Operations {
		names[i] = string(o)
	}
	return strings.Join(names, ", ")
}

// resourceSet is the set of an exact/prefix flag pair, nil when neither is
// set.
func resourceSet(fs *pflag.FlagSet, what, exact, prefix string) (*sdk.ResourceSet, error) {
	e, p := fs.Changed(what+"-exact"), fs.Changed(what+"-prefix")
	switch {
	case e && p:
		return nil, fmt.Errorf("--%s-exact and --%s-prefix exclude each other", what, what)
	case e:
		if exact == "" {
			return nil, fmt.Errorf("--%s-exact needs a name (a prefix of \"\" matches all)", what)
		}
		return sdk.ExactSet(exact), nil
	case p:
		return sdk.PrefixSet(prefix), nil
	}
	return nil, nil
}

// parseOpGroups parses "account=rw,basin=r,stream=w".
func parseOpGroups(s string) (*sdk.PermittedOperationGroups, error) {
	g := &sdk.PermittedOperationGroups{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, perms, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("--op-groups %q: want group=perms, e.g. stream=rw", part)
		}
		rw := &sdk.ReadWritePermissions{}
		for _, ch := range perms {
			switch ch {
			case 'r':
				rw.Read = true
			case 'w':
				rw.Write = true
			default:
				return nil, fmt.Errorf("--op-groups %q: permissions are r and w", part)
			}
		}
		switch name {
		case "account":
			g.Account = rw
		case "basin":
			g.Basin = rw
		case "stream":
			g.Stream = rw
		default:
			return nil, fmt.Errorf("--op-groups %q: the groups are account, basin and stream", part)
		}
	}
	return g, nil
}

// parseExpiresIn parses a Go duration, with d (days) and w (weeks).
func parseExpiresIn(s string) (time.Duration, error) {
	unit := time.Duration(0)
	switch {
	case strings.HasSuffix(s, "d"):
		unit = 24 * time.Hour
	case strings.HasSuffix(s, "w"):
		unit = 7 * 24 * time.Hour
	}
	var d time.Duration
	if unit != 0 {
		n, err := strconv.ParseUint(s[:len(s)-1], 10, 16)
		if err != nil {
			return 0, fmt.Errorf("--expires-in %q: want a duration like 12h, 30d or 2w", s)
		}
		if n > uint64(math.MaxInt64/unit) {
			// 65,535 weeks would wrap a Duration (to days, or negative).
			return 0, fmt.Errorf("--expires-in %q: at most %d%s", s, math.MaxInt64/unit, s[len(s)-1:])
		}
		d = time.Duration(n) * unit
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("--expires-in %q: want a duration like 12h, 30d or 2w", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("--expires-in %q: must be positive", s)
	}
	return d, nil
}

// request is the issue request the flags describe.
func (f *scopeFlags) request(fs *pflag.FlagSet, id string, now time.Time) (sdk.IssueAccessTokenRequest, error) {
	req := sdk.IssueAccessTokenRequest{ID: id, AutoPrefixStreams: f.autoPrefix}
	var err error
	if req.Scope.Basins, err = resourceSet(fs, "basins", f.basinsExact, f.basinsPrefix); err != nil {
		return req, err
	}
	if req.Scope.Streams, err = resourceSet(fs, "streams", f.streamsExact, f.streamsPrefix); err != nil {
		return req, err
	}
	if req.Scope.AccessTokens, err = resourceSet(fs, "access-tokens", f.tokensExact, f.tokensPrefix); err != nil {
		return req, err
	}
	if f.autoPrefix && (req.Scope.Streams == nil || req.Scope.Streams.Prefix == nil) {
		return req, fmt.Errorf("--auto-prefix-streams needs --streams-prefix")
	}
	if fs.Changed("op-groups") {
		if req.Scope.OpGroups, err = parseOpGroups(f.opGroups); err != nil {
			return req, err
		}
	}
	for _, o := range f.ops {
		op := sdk.Operation(strings.TrimSpace(o))
		if !slices.Contains(sdk.Operations, op) {
			return req, fmt.Errorf("--ops: unknown operation %q (the operations: %s)", o, opNames())
		}
		req.Scope.Ops = append(req.Scope.Ops, op)
	}
	if req.Scope.OpGroups == nil && len(req.Scope.Ops) == 0 {
		return req, fmt.Errorf("the token would allow no operation: set --op-groups or --ops")
	}
	switch {
	case f.expiresIn != "" && f.expiresAt != "":
		return req, fmt.Errorf("--expires-in and --expires-at exclude each other")
	case f.expiresIn != "":
		d, err := parseExpiresIn(f.expiresIn)
		if err != nil {
			return req, err
		}
		t := now.Add(d).UTC().Truncate(time.Second)
		req.ExpiresAt = &t
	case f.expiresAt != "":
		t, err := time.Parse(time.RFC3339, f.expiresAt)
		if err != nil {
			return req, fmt.Errorf("--expires-at %q: want an RFC 3339 time like 2027-01-31T00:00:00Z", f.expiresAt)
		}
		req.ExpiresAt = &t
	}
	return req, nil
}

func (c *conn) tokensIssueCmd() *cobra.Command {
	var f scopeFlags
	cmd := &cobra.Command{
		Use:   "issue ID",
		Short: "Issue an access token and print it (shown this once)",
		Long: `Issue an access token with the id ID (1 to 96 bytes, unique) and the scope
the flags describe, and print the token on stdout, alone on its line. The
server cannot show it again: store it now.

At least one of --op-groups and --ops is needed. A resource set left out
(basins, streams, access tokens) matches nothing; --*-prefix "" matches
all. Without --expires-in or --expires-at the token expires with the
token that issues it (never, for the admin token).`,
		Example: `  star tokens issue app-writer --basins-exact starlog-dev --streams-prefix app/ \
      --op-groups stream=rw --auto-prefix-streams --expires-in 30d
  star tokens issue ops-admin --basins-prefix "" --streams-prefix "" \
      --access-tokens-prefix ops- --op-groups account=rw,basin=rw,stream=rw`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := f.request(cmd.Flags(), args[0], time.Now())
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			tok, err := cl.IssueAccessToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			fmt.Fprintf(cmd.ErrOrStderr(), "issued access token %s: the token above is shown this once\n", args[0])
			return nil
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func (c *conn) tokensListCmd() *cobra.Command {
	var prefix, startAfter string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List access tokens",
		Long: `List the access tokens the calling token's scope may see (never their
secrets): id, expiry and scope. With --limit, one page of at most that many
(continue with --start-after set to the last id); without it, all.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var infos []sdk.AccessTokenInfo
			more := false
			if limit > 0 {
				page, err := cl.ListAccessTokens(cmd.Context(), api.ListRequest{Prefix: prefix, StartAfter: startAfter, Limit: limit})
				if err != nil {
					return err
				}
				infos, more = page.AccessTokens, page.HasMore
			} else {
				for t, err := range cl.AllAccessTokens(cmd.Context(), api.ListRequest{Prefix: prefix, StartAfter: startAfter}) {
					if err != nil {
						return err
					}
					infos = append(infos, t)
				}
			}
			if asJSON {
				if infos == nil {
					infos = []sdk.AccessTokenInfo{}
				}
				return printJSON(cmd.OutOrStdout(), sdk.ListAccessTokensResponse{AccessTokens: infos, HasMore: more})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, t := range infos {
				exp := "never"
				if t.ExpiresAt != nil {
					exp = t.ExpiresAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, exp, scopeSummary(t))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(cmd.ErrOrStderr(), "more: continue with --start-after %s\n", infos[len(infos)-1].ID)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only ids starting with this")
	cmd.Flags().StringVar(&startAfter, "start-after", "", "only ids after this one")
	cmd.Flags().IntVar(&limit, "limit", 0, "print one page of at most this many (1–1000); 0 lists all")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (S2's ListAccessTokensResponse)")
	return cmd
}

// scopeSummary renders a scope on one line, e.g.
// "basins=starlog-dev streams=app/* groups=stream:rw ops=read auto-prefix".
func scopeSummary(t sdk.AccessTokenInfo) string {
	set := func(s *sdk.ResourceSet) string {
		switch {
		case s == nil:
			return "-"
		case s.Prefix != nil:
			return *s.Prefix + "*"
		case s.Exact != nil && *s.Exact != "":
			return *s.Exact
		}
		return "-"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "basins=%s streams=%s access-tokens=%s", set(t.Scope.Basins), set(t.Scope.Streams), set(t.Scope.AccessTokens))
	if g := t.Scope.OpGroups; g != nil {
		var groups []string
		for _, e := range []struct {
			name string
			p    *sdk.ReadWritePermissions
		}{{"account", g.Account}, {"basin", g.Basin}, {"stream", g.Stream}} {
			if e.p == nil || (!e.p.Read && !e.p.Write) {
				continue
			}
			rw := ""
			if e.p.Read {
				rw += "r"
			}
			if e.p.Write {
				rw += "w"
			}
			groups = append(groups, e.name+":"+rw)
		}
		if len(groups) > 0 {
			b.WriteString(" groups=" + strings.Join(groups, ","))
		}
	}
	if len(t.Scope.Ops) > 0 {
		ops := make([]string, len(t.Scope.Ops))
		for i, o := range t.Scope.Ops {
			ops[i] = string(o)
		}
		b.WriteString(" ops=" + strings.Join(ops, ","))
	}
	if t.AutoPrefixStreams {
		b.WriteString(" auto-prefix")
	}
	return b.String()
}

func (c *conn) tokensRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an access token",
		Long: `Revoke the access token with id ID: it stops working at once on the star
that revoked it and within about 2 s on every other star. Revoking an unknown id
fails with access_token_not_found.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.RevokeAccessToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked access token %s\n", args[0])
			return nil
		},
	}
}
