// Package clientcmd holds the client commands of the star binary: basins,
// streams and access tokens management, append, read, tail, check-tail and
// bench. They
// speak the public API through the Go SDK (shared/sdk), so they work
// against any S2-compatible server, a star included.
package clientcmd

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// Environment variables read for the connection flags.
const (
	EnvEndpoint        = "STARLOG_ENDPOINT"
	EnvAccountEndpoint = "S2_ACCOUNT_ENDPOINT"
	EnvBasinEndpoint   = "S2_BASIN_ENDPOINT"
	EnvBasin           = "S2_BASIN"
	EnvToken           = "S2_ACCESS_TOKEN"
)

// Commands returns the client commands, for the star root command to add.
// The connection flags (--endpoint, --basin, --token, ...) are persistent
// flags of each of them.
func Commands() []*cobra.Command {
	return newCommands(os.LookupEnv)
}

// conn holds the connection flags of one command tree.
type conn struct {
	lookupEnv     func(string) (string, bool)
	endpoint      string
	basinEndpoint string
	basin         string
	token         string
	compression   string
	// internalKeyFile is the admin commands' internal key (admin.go).
	internalKeyFile string
	// internalKeySecret names a Secrets Manager secret holding it.
	internalKeySecret string
	// encoding of unary appends and reads (bench --encoding).
	encoding sdk.Encoding
}

func newCommands(lookupEnv func(string) (string, bool)) []*cobra.Command {
	c := &conn{lookupEnv: lookupEnv}
	cmds := []*cobra.Command{
		c.basinsCmd(),
		c.streamsCmd(),
		c.appendCmd(),
		c.readCmd(),
		c.tailCmd(),
		c.checkTailCmd(),
		c.benchCmd(),
		c.tokensCmd(),
		c.drainCmd(),
		c.statusCmd(),
		c.durableCmd(),
	}
	for _, cmd := range cmds {
		c.addFlags(cmd)
	}
	return cmds
}

func (c *conn) addFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&c.endpoint, "endpoint", "",
		"account endpoint URL (env "+EnvEndpoint+" or "+EnvAccountEndpoint+"; default "+sdk.DefaultEndpoint+")")
	f.StringVar(&c.basinEndpoint, "basin-endpoint", "",
		"basin endpoint URL, when it differs from --endpoint; {basin} in it is replaced by the basin name (env "+EnvBasinEndpoint+")")
	f.StringVar(&c.basin, "basin", "", "basin of the streams (env "+EnvBasin+")")
	f.StringVar(&c.token, "token", "", "access token, sent as a bearer token (env "+EnvToken+")")
	f.StringVar(&c.compression, "compression", "none", "compression of session frames: none or gzip")
	f.StringVar(&c.internalKeySecret, "internal-key-secret", "", "AWS Secrets Manager secret (ARN or name) holding the cluster's internal key, for the admin commands (env "+EnvInternalKeySecret+")")
	f.StringVar(&c.internalKeyFile, "internal-key-file", "", "file holding the cluster's internal key, for the admin commands drain, streams move and durable (env "+EnvInternalKeyFile+", or "+EnvInternalKey+" holding the key)")
}

// fromEnv returns v, else the first set environment variable of names.
func (c *conn) fromEnv(v string, names ...string) string {
	if v != "" {
		return v
	}
	for _, n := range names {
		if e, ok := c.lookupEnv(n); ok && e != "" {
			return e
		}
	}
	return ""
}

// client builds an SDK client from the flags and environment.
func (c *conn) client() (*sdk.Client, error) {
	cfg := sdk.Config{
		AccountEndpoint: c.fromEnv(c.endpoint, EnvEndpoint, EnvAccountEndpoint),
		BasinEndpoint:   c.fromEnv(c.basinEndpoint, EnvBasinEndpoint),
		Token:           c.fromEnv(c.token, EnvToken),
		UserAgent:       "star-cli",
		Encoding:        c.encoding,
	}
	switch c.compression {
	case "", "none":
	case "gzip":
		cfg.Compression = api.CompressionGzip
	default:
		return nil, fmt.Errorf("--compression must be none or gzip, got %q", c.compression)
	}
	return sdk.New(cfg)
}

// basinHandle returns the client's handle on the --basin basin.
func (c *conn) basinHandle() (*sdk.Basin, error) {
	name := c.fromEnv(c.basin, EnvBasin)
	if name == "" {
		return nil, errors.New("no basin: set --basin or " + EnvBasin + " (star dev creates starlog-dev)")
	}
	cl, err := c.client()
	if err != nil {
		return nil, err
	}
	return cl.Basin(name), nil
}

// stream returns a handle on the named stream of the --basin basin.
func (c *conn) stream(name string) (*sdk.Stream, error) {
	b, err := c.basinHandle()
	if err != nil {
		return nil, err
	}
	return b.Stream(name), nil
}

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// Output formats of records.
const (
	formatText       = "text"
	formatJSON       = "json"
	formatJSONBase64 = "json-base64"
)

func checkFormat(f string) error {
	switch f {
	case formatText, formatJSON, formatJSONBase64:
		return nil
	}
	return fmt.Errorf("--format must be %s, %s or %s, got %q", formatText, formatJSON, formatJSONBase64, f)
}

// recordJSON is one record in the JSON output formats.
type recordJSON struct {
	SeqNum    uint64      `json:"seq_num"`
	Timestamp uint64      `json:"timestamp"`
	Headers   [][2]string `json:"headers,omitempty"`
	Body      string      `json:"body"`
}

// text renders bytes for the raw JSON format: invalid UTF-8 becomes
// U+FFFD, as the API's raw format does.
func text(b []byte, b64 bool) string {
	if b64 {
		return base64.StdEncoding.EncodeToString(b)
	}
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// writeRecord prints one record in format f: the body and a newline for
// text, one JSON object per line otherwise.
func writeRecord(w *bufio.Writer, r *api.Record, f string) error {
	if f == formatText {
		w.Write(r.Body)
		return w.WriteByte('\n') // a bufio.Writer keeps its first error
	}
	b64 := f == formatJSONBase64
	out := recordJSON{SeqNum: r.SeqNum, Body: text(r.Body, b64)}
	if r.Timestamp != nil {
		out.Timestamp = *r.Timestamp
	}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, [2]string{text(h.Name, b64), text(h.Value, b64)})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
