package clientcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/awssecret"
	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/star/auth"
)

// Environment variables of the cluster's internal key, which the admin
// commands (drain, streams move) need: starlog's own endpoints take the
// internal credential derived from it, never an access token.
const (
	EnvInternalKey       = "STARLOG_INTERNAL_KEY"
	EnvInternalKeyFile   = "STARLOG_INTERNAL_KEY_FILE"
	EnvInternalKeySecret = "STARLOG_INTERNAL_KEY_SECRET"
)

// internalCredential derives the internal credential from
// --internal-key-file, --internal-key-secret (a Secrets Manager secret:
// the stack's drain script) or STARLOG_INTERNAL_KEY.
func (c *conn) internalCredential(ctx context.Context) (string, error) {
	key := []byte(c.fromEnv("", EnvInternalKey))
	if id := c.fromEnv(c.internalKeySecret, EnvInternalKeySecret); id != "" {
		v, err := awssecret.Fetch(ctx, id)
		if err != nil {
			return "", fmt.Errorf("internal key: %w", err)
		}
		key = []byte(strings.TrimSpace(v))
	}
	if f := c.fromEnv(c.internalKeyFile, EnvInternalKeyFile); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("internal key: %w", err)
		}
		key = bytes.TrimSpace(b)
	}
	if len(key) == 0 {
		return "", fmt.Errorf("admin commands need the cluster's internal key: set --internal-key-file, --internal-key-secret, %s or %s (star dev keeps it in <data>/dev-internal-key)", EnvInternalKeyFile, EnvInternalKey)
	}
	return auth.InternalCredential(key)
}

// adminCall sends one request to a star's admin extension (/v1/starlog/…)
// at the account endpoint and decodes a JSON answer into out. Any star
// takes stream calls: one that does not lead the stream forwards them.
func (c *conn) adminCall(ctx context.Context, method, path, basin string, in, out any) error {
	base := c.fromEnv(c.endpoint, EnvEndpoint, EnvAccountEndpoint)
	if base == "" {
		base = sdk.DefaultEndpoint
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+path, body)
	if err != nil {
		return fmt.Errorf("admin request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if basin != "" {
		req.Header.Set(api.HeaderBasin, basin)
	}
	if tok := c.fromEnv(c.token, EnvToken); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	cred, err := c.internalCredential(ctx)
	if err != nil {
		return err
	}
	req.Header.Set(auth.HeaderInternal, cred)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("admin request %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("admin request %s %s: read answer: %w", method, path, err)
	}
	if res.StatusCode/100 != 2 {
		return api.ParseError(res.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("admin request %s %s: answer: %w", method, path, err)
		}
	}
	return nil
}

// moveCmd is `star streams move STREAM --to STAR`.
func (c *conn) moveCmd() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "move STREAM --to STAR",
		Short: "Hand a stream's leadership to another star",
		Long: `Hand the leadership of a stream to another live star (a handoff): its
leader stops admitting appends (producers retry them), waits until rows
cover everything it acknowledged, and releases the stream to STAR, which
takes it without settling. Any star at --endpoint takes the call.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return fmt.Errorf("--to is required")
			}
			basin := c.fromEnv(c.basin, EnvBasin)
			if basin == "" {
				return fmt.Errorf("no basin: set --basin or %s", EnvBasin)
			}
			var res struct {
				From     string `json:"from"`
				To       string `json:"to"`
				Frontier uint64 `json:"frontier"`
				TookMs   int64  `json:"took_ms"`
			}
			path := "/v1/starlog/streams/" + url.PathEscape(args[0]) + "/handoff"
			if err := c.adminCall(cmd.Context(), http.MethodPost, path, basin, map[string]string{"to": to}, &res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "moved stream %s from %s to %s at seq %d in %v\n",
				args[0], res.From, res.To, res.Frontier, time.Duration(res.TookMs)*time.Millisecond)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "star id to hand the stream to")
	return cmd
}

// drainCmd is `star drain [--wait]`, which the instance's lifecycle hook
// runs before Auto Scaling terminates it.
func (c *conn) drainCmd() *cobra.Command {
	var wait bool
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Drain a star: it takes no new streams and releases those it leads",
		Long: `Drain the star at --endpoint (the local star on an instance): it takes no
new stream leases, releases every stream it leads once rows cover what it
acknowledged (successors take them without settling), then, leading
nothing, settles its own chains, and opens its terminate gate. With --wait
the command returns only then, printing progress. Draining lasts until the
star process exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st struct {
				Draining bool   `json:"draining"`
				Leading  int    `json:"leading"`
				Settled  bool   `json:"chains_settled"`
				Gate     bool   `json:"terminate_gate_open"`
				Error    string `json:"error"`
			}
			ctx := cmd.Context()
			if err := c.adminCall(ctx, http.MethodPost, "/v1/starlog/drain", "", nil, &st); err != nil {
				return err
			}
			progress := func() string {
				switch {
				case st.Leading > 0:
					return fmt.Sprintf("draining: %d streams still led", st.Leading)
				case st.Error != "":
					return "draining: settling the star's own chains (retrying: " + st.Error + ")"
				default:
					return "draining: settling the star's own chains"
				}
			}
			for wait && !st.Gate {
				fmt.Fprintln(cmd.ErrOrStderr(), progress())
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(every):
				}
				if err := c.adminCall(ctx, http.MethodGet, "/v1/starlog/drain", "", nil, &st); err != nil {
					return err
				}
			}
			if st.Gate {
				fmt.Fprintln(cmd.OutOrStdout(), "drained: the star leads no stream and its chains are settled; terminate gate open")
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), progress())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "return only when the star leads nothing and settled its chains (its terminate gate is open)")
	cmd.Flags().DurationVar(&every, "poll", 500*time.Millisecond, "how often --wait polls the star")
	return cmd
}
