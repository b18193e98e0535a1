package servecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/auditjob/awsenv"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/quarantine"
)

// Settle is `star settle`: operator commands on the auditor's state,
// today the settle quarantine (docs/settle.md "Quarantine").
func Settle() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "settle",
		Short: "Operate on the auditor's settle state",
	}
	cmd.AddCommand(quarantineCmd())
	return cmd
}

func quarantineCmd() *cobra.Command {
	var (
		c       common
		data    string
		useAWS  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "quarantine",
		Short: "List, retry or force streams whose settle keeps failing",
		Long: `Streams whose settle failed in 3 consecutive jobs (STARLOG_SETTLE_QUARANTINE_AFTER on AWS) are
set aside: their slots are pinned and every other stream's slots are trimmed.

  list          the failing streams: failures, quarantined since, last error, pins
  retry <id>    settle the stream now over its pinned slots; success lifts the
                quarantine and deletes the pinned slots the trim already passed
  force <id>    lift the quarantine without a settle: refused while any span ref
                of the stream still reads a pinned slot (so no readable byte is
                dropped); for a stream deleted, or settled another way

The stores are the dev star's under --data, or with --aws the auditor
functions' (the environment the stack gives them: STARLOG_DYNAMO_TABLE,
STARLOG_STANDARD_BUCKETS, ...).`,
	}
	open := func(ctx context.Context) (*settle.Stores, func(), error) {
		log, err := c.logger()
		if err != nil {
			return nil, nil, err
		}
		if useAWS {
			env, err := awsenv.Parse(os.LookupEnv)
			if err != nil {
				return nil, nil, err
			}
			rt, err := awsenv.Open(ctx, env, log)
			if err != nil {
				return nil, nil, err
			}
			return rt.Stores, func() {}, nil
		}
		cfg := c.nodeConfig()
		ms, objs, err := openDevStores(ctx, data, cfg)
		if err != nil {
			return nil, nil, err
		}
		sc := cfg.Settle
		sc.ScratchDir = filepath.Join(data, "scratch")
		closeStores := func() {
			if c, ok := objs.(io.Closer); ok {
				c.Close() // the journal's records written out, its lock let go
			}
			ms.Close()
		}
		if err := os.MkdirAll(sc.ScratchDir, 0o755); err != nil {
			closeStores()
			return nil, nil, err
		}
		st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: cfg.Standard.Buckets[0],
			Streams: settle.MetaStreams{Meta: ms}, Config: sc, Metrics: settle.NewMetrics(nil), Logger: log}
		return st, closeStores, nil
	}
	run := func(fn func(ctx context.Context, st *settle.Stores, out io.Writer) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st, closeFn, err := open(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			return fn(ctx, st, cmd.OutOrStdout())
		}
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the streams whose settle failed, quarantined or not yet",
		Args:  cobra.NoArgs,
	}
	list.RunE = run(func(ctx context.Context, st *settle.Stores, out io.Writer) error {
		qs, err := quarantine.List(ctx, st.Meta)
		if err != nil {
			return err
		}
		return printQuarantine(out, qs)
	})
	var id string
	retry := &cobra.Command{Use: "retry <stream-id>", Short: "Settle a quarantined stream now", Args: cobra.ExactArgs(1),
		PreRun: func(_ *cobra.Command, args []string) { id = args[0] }}
	retry.RunE = run(func(ctx context.Context, st *settle.Stores, out io.Writer) error {
		rep, err := quarantine.Retry(ctx, st, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "stream %s settled (%d objects); quarantine lifted\n", id, rep.Objects)
		return nil
	})
	force := &cobra.Command{Use: "force <stream-id>", Short: "Lift a quarantine without a settle (refused while its bytes need the pins)", Args: cobra.ExactArgs(1),
		PreRun: func(_ *cobra.Command, args []string) { id = args[0] }}
	force.RunE = run(func(ctx context.Context, st *settle.Stores, out io.Writer) error {
		if err := quarantine.Force(ctx, st, id); err != nil {
			if errors.Is(err, quarantine.ErrNotQuarantined) {
				return err
			}
			return fmt.Errorf("%w\n(retry the stream, or delete it, first)", err)
		}
		fmt.Fprintf(out, "stream %s: quarantine lifted, pins released\n", id)
		return nil
	})
	cmd.AddCommand(list, retry, force)
	pf := cmd.PersistentFlags()
	pf.StringVar(&data, "data", DefaultDevData, "the dev star's data folder (without --aws)")
	pf.BoolVar(&useAWS, "aws", false, "use the auditor functions' stores, from their environment variables")
	pf.DurationVar(&timeout, "timeout", 5*time.Minute, "bound on the whole command")
	c.register(pf, DefaultDevListen)
	return withEnv(cmd)
}

func printQuarantine(out io.Writer, qs []quarantine.Quarantined) error {
	if len(qs) == 0 {
		fmt.Fprintln(out, "no failing streams")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tBASIN\tFAILURES\tQUARANTINED\tPINS\tLAST ERROR")
	for _, q := range qs {
		since := "no (counting)"
		if q.Quarantined != 0 {
			since = time.UnixMilli(q.Quarantined).UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", q.Stream, q.Basin, q.Failures, since, len(q.Pins), q.Err)
	}
	return tw.Flush()
}
