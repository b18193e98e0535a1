package servecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// Dev defaults.
const (
	DefaultDevListen = "127.0.0.1:7480"
	DefaultDevData   = "./data"
	DefaultDevBasin  = "starlog-dev"
)

// Dev is `star dev`: one embedded star on a data folder (SQLite metastore,
// directory object store with one Standard and three Express buckets).
func Dev() *cobra.Command {
	var (
		c     common
		data  string
		basin string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run one embedded star on a local data folder",
		Long: `Run one star with everything embedded under --data:

  <data>/meta.db      the metastore (SQLite, WAL)
  <data>/objects/     the object store: buckets standard, express-a,
                      express-b, express-c (one directory each)
  <data>/star-id      this star's id, kept so a restart on the same data
                      settles what the previous run left

On first start it creates the basin --basin (streams are created on first
append or read). Stop it with Ctrl-C (or kill -9) and start it again on the
same data: every acknowledged record reads back at its seq num.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.logger()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(data, 0o755); err != nil {
				return fmt.Errorf("--data %s: %w", data, err)
			}
			cfg := c.nodeConfig()
			if cfg.StarID == "" {
				if cfg.StarID, err = devStarID(data); err != nil {
					return err
				}
			}
			cfg.Meta.SQLitePath = filepath.Join(data, "meta.db")
			cfg.Objects.FSRoot = filepath.Join(data, "objects")
			out := cmd.OutOrStdout()
			return run(runOptions{
				listen: c.listen, cfg: cfg, log: log, shutdownTimeout: c.shutdownTimeout,
				srv: server.Options{HeartbeatMin: c.heartbeatMin, HeartbeatMax: c.heartbeatMx},
				ready: func(ctx context.Context, n *node.Node, addr net.Addr) error {
					if basin != "" {
						if err := ensureDevBasin(ctx, n, basin); err != nil {
							return err
						}
					}
					printBanner(out, n, addr, data, basin)
					return nil
				},
			})
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&data, "data", DefaultDevData, "folder holding the metastore and the object store")
	fs.StringVar(&basin, "basin", DefaultDevBasin, "basin to create on first start, with streams created on append and read (empty: none)")
	c.register(fs, DefaultDevListen)
	return withEnv(cmd)
}

// devStarID reads the star id kept in the data folder, or keeps the
// hostname-derived one there on first start.
func devStarID(data string) (string, error) {
	p := filepath.Join(data, "star-id")
	b, err := os.ReadFile(p)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err := node.ValidateStarID(id); err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	id := node.DefaultStarID()
	if err := os.WriteFile(p, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return id, nil
}

// ensureDevBasin creates the dev basin if it does not exist; an existing
// one is left as the user configured it.
func ensureDevBasin(ctx context.Context, n *node.Node, name string) error {
	_, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: name, Config: &api.BasinConfig{
		CreateStreamOnAppend: true, CreateStreamOnRead: true,
	}}, "")
	var e *api.Error
	if errors.As(err, &e) && e.Status == 409 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create basin %s: %w", name, err)
	}
	return nil
}

func printBanner(w io.Writer, n *node.Node, addr net.Addr, data, basin string) {
	url := "http://" + addr.String()
	fmt.Fprintf(w, "\nstarlog dev: star %s (incarnation %d) serving the S2 API on %s\n", n.StarID(), n.Incarnation(), url)
	fmt.Fprintf(w, "  data:    %s (SQLite metastore; object store with buckets standard, express-a, express-b, express-c)\n", data)
	if basin == "" {
		fmt.Fprintf(w, "\nCreate a basin first: curl -X POST %s/v1/basins -d '{\"basin\":\"my-basin-1\"}'\n\n", url)
		return
	}
	fmt.Fprintf(w, "  basin:   %s (creates streams on first append or read)\n", basin)
	fmt.Fprintf(w, "  metrics: %s/metrics   health: %s/health\n", url, url)
	fmt.Fprintf(w, "\nTry it:\n")
	fmt.Fprintf(w, "  curl -s -X POST -H 's2-basin: %s' -H 'content-type: application/json' \\\n", basin)
	fmt.Fprintf(w, "    -d '{\"records\":[{\"body\":\"hello\"}]}' %s/v1/streams/hello/records\n", url)
	fmt.Fprintf(w, "  curl -s -H 's2-basin: %s' '%s/v1/streams/hello/records?seq_num=0'\n", basin, url)
	fmt.Fprintf(w, "\nS2 SDKs and CLI:\n")
	fmt.Fprintf(w, "  export S2_ACCOUNT_ENDPOINT=%s S2_BASIN_ENDPOINT=%s S2_ACCESS_TOKEN=unused\n\n", url, url)
}
