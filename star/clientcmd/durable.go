package clientcmd

import (
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// Paths of a star's subscription key routes (star/server/durablekeys.go).
const (
	durableKeysPath   = "/v1/starlog/durable/keys"
	durableRotatePath = "/v1/starlog/durable/keys/rotate"
)

// durableKeys is the routes' answer.
type durableKeys struct {
	Basin string `json:"basin"`
	Keys  []struct {
		Kid        string    `json:"kid"`
		State      string    `json:"state"`
		Created    time.Time `json:"created"`
		SignsFrom  time.Time `json:"signs_from"`
		SignsUntil time.Time `json:"signs_until"`
		DropAt     time.Time `json:"drop_at"`
	} `json:"keys"`
}

// durableCmd is `star durable …`: the Durable Streams face's operator
// commands. They need the cluster's internal key, as drain does.
func (c *conn) durableCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "durable",
		Short: "Operate the Durable Streams face (subscription keys)",
		Long: `Operator commands of the Durable Streams face. Subscriptions sign their
webhooks with an Ed25519 key (published in <root>__ds/jwks.json) and their
wake tokens with an HMAC key; the stars keep both in one metastore row and
rotate them every --durable-key-rotation (30 days by default). These
commands take the cluster's internal key, like drain; any star at
--endpoint takes them.`,
	}
	cmd.AddCommand(c.durableKeysCmd(), c.durableRotateCmd())
	return cmd
}

func (c *conn) durableKeysCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keys",
		Short: "List the subscription keys and when each signs and is dropped",
		Long: `List the subscription keys the row holds: pending (published in the JWK
Set, not signing yet), signing, or retired (still published, its wake
tokens still valid, until it is dropped).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res durableKeys
			if err := c.adminCall(cmd.Context(), http.MethodGet, durableKeysPath, "", nil, &res); err != nil {
				return err
			}
			return printDurableKeys(cmd.OutOrStdout(), res)
		},
	}
}

func (c *conn) durableRotateCmd() *cobra.Command {
	var emergency bool
	cmd := &cobra.Command{
		Use:   "rotate-keys [--emergency]",
		Short: "Add a subscription key now; --emergency replaces every key at once",
		Long: `Add a subscription key now. As a scheduled rotation: the new key is
published in the JWK Set at once and signs 10 minutes later; the key it
replaces stays published, and its wake tokens valid, for an hour more.

With --emergency (a leaked key) the new key signs at once and every other
key is dropped: old kids leave the JWK Set, and every wake token in flight
is refused (401 TOKEN_INVALID; its wake is woken again with a new token
once its lease runs out). The star that takes the call switches at once,
the others within a minute (their next read of the row).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res durableKeys
			if err := c.adminCall(cmd.Context(), http.MethodPost, durableRotatePath, "", map[string]bool{"emergency": emergency}, &res); err != nil {
				return err
			}
			return printDurableKeys(cmd.OutOrStdout(), res)
		},
	}
	cmd.Flags().BoolVar(&emergency, "emergency", false, "sign with the new key at once and drop every other key (a leaked key): wake tokens in flight are refused")
	return cmd
}

func printDurableKeys(w io.Writer, res durableKeys) error {
	if len(res.Keys) == 0 {
		_, err := fmt.Fprintf(w, "basin %s: no subscription keys yet (the first subscription request creates them)\n", res.Basin)
		return err
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KID\tSTATE\tSIGNS FROM\tSIGNS UNTIL\tDROPPED AT")
	for _, k := range res.Keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.Kid, k.State, at(k.SignsFrom), at(k.SignsUntil), at(k.DropAt))
	}
	return tw.Flush()
}
