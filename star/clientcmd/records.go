package clientcmd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// interruptible is ctx ended also by Ctrl-C or SIGTERM.
func interruptible(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

func (c *conn) appendCmd() *cobra.Command {
	var (
		matchSeqNum  uint64
		fencingToken string
		linger       time.Duration
		maxRecords   int
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "append STREAM",
		Short: "Append stdin's lines to a stream, one record per line",
		Long: `Append the lines of standard input to a stream, one record per line (the
line without its line ending is the record's body; lines up to 1 MiB).

Records are batched on an append session: a batch goes out when it holds
--max-batch-records records or 1 MiB, or when its first record has waited
--linger. Each batch's ack is printed as it arrives:
  [start, end) tail=N
or as JSON lines with --json.

--match-seq-num makes the append conditional: the first record must get
that seq num, and every later batch must follow on directly, so nothing is
duplicated or interleaved; a mismatch stops the append with the stream's
next seq num. --fencing-token makes every batch carry that token.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := c.stream(args[0])
			if err != nil {
				return err
			}
			opts := sdk.ProducerOptions{Linger: linger, MaxBatchRecords: maxRecords}
			if cmd.Flags().Changed("match-seq-num") {
				opts.MatchSeqNum = &matchSeqNum
			}
			if cmd.Flags().Changed("fencing-token") {
				opts.FencingToken = &fencingToken
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			return runAppend(ctx, s, opts, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), asJSON)
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&matchSeqNum, "match-seq-num", 0, "seq num the first record must get (conditional append)")
	f.StringVar(&fencingToken, "fencing-token", "", "fencing token every batch carries")
	f.DurationVar(&linger, "linger", 10*time.Millisecond, "how long a batch waits for more records")
	f.IntVar(&maxRecords, "max-batch-records", api.MaxBatchRecords, "records per batch (at most 1000)")
	f.BoolVar(&asJSON, "json", false, "print acks as JSON lines")
	return cmd
}

// runAppend feeds in's lines to a producer and prints each batch's ack.
func runAppend(ctx context.Context, s *sdk.Stream, opts sdk.ProducerOptions, in io.Reader, out, errOut io.Writer, asJSON bool) error {
	p, err := s.NewProducer(ctx, opts)
	if err != nil {
		return err
	}
	futs := make(chan *sdk.RecordFuture, 4096)
	printed := make(chan error, 1)
	go func() { printed <- printAcks(ctx, futs, out, asJSON) }()

	sc := bufio.NewScanner(in)
	// A record of one line: its body plus 8 metered bytes fit in a batch.
	sc.Buffer(make([]byte, 64<<10), api.MaxBatchMeteredBytes-8+2)
	var submitErr error
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		if k := len(line); k > 0 && line[k-1] == '\r' {
			line = line[:k-1]
		}
		f, err := p.Submit(ctx, api.Record{Body: append([]byte(nil), line...)})
		if err != nil {
			submitErr = err
			break
		}
		futs <- f
		n++
	}
	readErr := sc.Err()
	close(futs)
	closeErr := p.Close(ctx)
	printErr := <-printed
	if printErr == nil {
		fmt.Fprintf(errOut, "appended %d records\n", n)
	}
	switch {
	case printErr != nil:
		return describeAppendErr(printErr)
	case submitErr != nil:
		return describeAppendErr(submitErr)
	case readErr != nil:
		return fmt.Errorf("read stdin: %w", readErr)
	case closeErr != nil:
		return describeAppendErr(closeErr)
	}
	return nil
}

// printAcks prints one line per batch as its records' acks arrive, in
// order; it stops at the first failed record and returns its error.
func printAcks(ctx context.Context, futs <-chan *sdk.RecordFuture, out io.Writer, asJSON bool) error {
	var last *api.AppendAck
	var failed error
	for f := range futs {
		if failed != nil {
			continue // drain
		}
		ack, err := f.Wait(ctx)
		if err != nil {
			failed = err
			continue
		}
		if last != nil && *last == ack.Batch {
			continue
		}
		b := ack.Batch
		last = &b
		if asJSON {
			line, _ := json.Marshal(b)
			fmt.Fprintf(out, "%s\n", line)
		} else {
			fmt.Fprintf(out, "[%d, %d) tail=%d\n", b.Start.SeqNum, b.End.SeqNum, b.Tail.SeqNum)
		}
	}
	return failed
}

// describeAppendErr adds what an append failure means for the caller.
func describeAppendErr(err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		if n, ok := ae.ExpectedSeqNum(); ok {
			return fmt.Errorf("%w (the stream's next seq num is %d)", err, n)
		}
		if tok, ok := ae.CurrentFencingToken(); ok {
			return fmt.Errorf("%w (the stream's fencing token is %q)", err, tok)
		}
	}
	if !sdk.IsDefinite(err) {
		return fmt.Errorf("%w (some records may have been appended)", err)
	}
	return err
}

// startFlags are --seq-num, --timestamp and --tail-offset.
type startFlags struct {
	seqNum, timestamp, tailOffset uint64
}

func (f *startFlags) register(fs *pflag.FlagSet, what string) {
	fs.Uint64Var(&f.seqNum, "seq-num", 0, "start at this seq num"+what)
	fs.Uint64Var(&f.timestamp, "timestamp", 0, "start at the first record with a timestamp (ms) at or after this")
	fs.Uint64Var(&f.tailOffset, "tail-offset", 0, "start this many records before the tail")
}

// request builds the read's start; def applies when no flag is set.
func (f *startFlags) request(fs *pflag.FlagSet, def api.ReadFrom) (api.ReadRequest, error) {
	var req api.ReadRequest
	n := 0
	if fs.Changed("seq-num") {
		req.From, req.Value = api.FromSeqNum, f.seqNum
		n++
	}
	if fs.Changed("timestamp") {
		req.From, req.Value = api.FromTimestamp, f.timestamp
		n++
	}
	if fs.Changed("tail-offset") {
		req.From, req.Value = api.FromTailOffset, f.tailOffset
		n++
	}
	if n > 1 {
		return req, errors.New("give at most one of --seq-num, --timestamp and --tail-offset")
	}
	if n == 0 {
		req.From = def
	}
	return req, nil
}

func (c *conn) readCmd() *cobra.Command {
	var (
		start  startFlags
		count  uint64
		bytes  uint64
		format string
		clamp  bool
		prof   string
	)
	cmd := &cobra.Command{
		Use:   "read STREAM",
		Short: "Read records from a stream up to its tail",
		Long: `Read records from a stream, from --seq-num (default 0), --timestamp or
--tail-offset, until --count records or --bytes metered bytes have been
read, or the tail is reached.

--format text prints each body on its own line; json prints one JSON
object per record ({"seq_num","timestamp","headers","body"}, bytes as
UTF-8 text, invalid sequences replaced); json-base64 is the same with
header names, values and bodies in base64.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			s, err := c.stream(args[0])
			if err != nil {
				return err
			}
			req, err := start.request(cmd.Flags(), api.FromSeqNum)
			if err != nil {
				return err
			}
			req.Clamp = clamp
			var limit readLimit
			if cmd.Flags().Changed("count") {
				limit.count = &count
			}
			if cmd.Flags().Changed("bytes") {
				limit.bytes = &bytes
			}
			stopProfile, err := startCPUProfile(prof)
			if err != nil {
				return err
			}
			defer stopProfile()
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			return runRead(ctx, s, req, limit, cmd.OutOrStdout(), cmd.ErrOrStderr(), format)
		},
	}
	f := cmd.Flags()
	start.register(f, " (the default, from 0)")
	f.Uint64Var(&count, "count", 0, "read at most this many records")
	f.Uint64Var(&bytes, "bytes", 0, "read at most this many metered bytes")
	f.StringVar(&format, "format", formatText, "output: text, json or json-base64")
	f.BoolVar(&clamp, "clamp", false, "start at the tail when the start is past it")
	f.StringVar(&prof, "cpuprofile", "", "write this process's CPU profile of the read to the file")
	return cmd
}

type readLimit struct{ count, bytes *uint64 }

// runRead reads on one read session until a limit or the tail: the
// server streams batches back to back (a unary read per batch would wait a
// round trip each), and output is buffered, flushed when the buffer fills
// and at the end.
func runRead(ctx context.Context, s *sdk.Stream, req api.ReadRequest, limit readLimit, out, errOut io.Writer, format string) error {
	if (limit.count != nil && *limit.count == 0) || (limit.bytes != nil && *limit.bytes == 0) {
		return nil
	}
	req.Count, req.Bytes = limit.count, limit.bytes
	noWait := time.Duration(0)
	req.Wait = &noWait // end at the tail
	// Each batch is written out before the next is read: decoded in
	// place, not copied out of its frame.
	rs, err := s.ReadSession(ctx, req, sdk.ReadSessionOptions{ReuseBatch: true})
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status == http.StatusRequestedRangeNotSatisfiable {
		tail, _ := ae.Tail()
		fmt.Fprintf(errOut, "nothing to read: the tail is at seq num %d\n", tail.SeqNum)
		return nil
	}
	if err != nil {
		return err
	}
	defer rs.Close()
	w := bufio.NewWriterSize(out, 256<<10)
	defer w.Flush()
	for {
		b, err := rs.Next()
		if errors.Is(err, io.EOF) {
			return w.Flush()
		}
		if err != nil {
			return err
		}
		for i := range b.Records {
			if err := writeRecord(w, &b.Records[i], format); err != nil {
				return err
			}
		}
	}
}

func (c *conn) tailCmd() *cobra.Command {
	var (
		start   startFlags
		format  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "tail STREAM",
		Short: "Follow a stream live, printing records as they arrive",
		Long: `Follow a stream on a read session, printing records as they are appended,
until Ctrl-C. By default it starts at the tail (only new records); give
--seq-num, --timestamp or --tail-offset to start earlier. The session
reconnects by itself after a failure, resuming after the last record
printed. --format is as for read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			s, err := c.stream(args[0])
			if err != nil {
				return err
			}
			req, err := start.request(cmd.Flags(), api.FromTailOffset)
			if err != nil {
				return err
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			return runTail(ctx, s, req, cmd.OutOrStdout(), format)
		},
	}
	start.register(cmd.Flags(), "")
	cmd.Flags().StringVar(&format, "format", formatText, "output: text, json or json-base64")
	cmd.Flags().DurationVar(&timeout, "for", 0, "stop after this long (default: until Ctrl-C)")
	return cmd
}

// runTail prints records from a read session until ctx ends.
func runTail(ctx context.Context, s *sdk.Stream, req api.ReadRequest, out io.Writer, format string) error {
	rs, err := s.ReadSession(ctx, req, sdk.ReadSessionOptions{ReuseBatch: true})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer rs.Close()
	w := bufio.NewWriter(out)
	defer w.Flush()
	for {
		b, err := rs.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil // Ctrl-C or --for: a normal end
			}
			return err
		}
		for i := range b.Records {
			if err := writeRecord(w, &b.Records[i], format); err != nil {
				return err
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
}

func (c *conn) checkTailCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check-tail STREAM",
		Short: "Print a stream's tail: the next seq num and the last timestamp",
		Long: `Print the stream's tail: the seq num the next record will get, and the
timestamp (ms) of the last record, separated by a tab (0 and 0 for an empty
stream); with --json, {"seq_num","timestamp"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := c.stream(args[0])
			if err != nil {
				return err
			}
			tail, err := s.CheckTail(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), tail)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%d\t%d\n", tail.SeqNum, tail.Timestamp)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
