package clientcmd

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/api"
)

func (c *conn) basinsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "basins",
		Short: "Manage basins (list, create, get, reconfigure, delete)",
		Long: `Manage basins, the namespaces that hold streams.

Basin names are 8 to 48 characters of lower-case letters, digits and
hyphens, not starting or ending with a hyphen.`,
	}
	var prefix string
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List basins",
		Long:  "List every basin, or those whose name starts with --prefix: name, creation time, and state.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var infos []api.BasinInfo
			for b, err := range cl.AllBasins(cmd.Context(), prefix) {
				if err != nil {
					return err
				}
				infos = append(infos, b)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), infos)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, b := range infos {
				state := "active"
				if b.DeletedAt != nil {
					state = "deleting"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", b.Name, b.CreatedAt.Format(time.RFC3339), state)
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&prefix, "prefix", "", "only basins whose name starts with this")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var onAppend, onRead bool
	var defaults streamConfigFlags
	var quotas quotaFlags
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a basin",
		Long: `Create a basin. The stream config flags set the basin's default stream
config, which streams created without those settings inherit. The quota
flags set its quotas (see star basins reconfigure; they need the
reconfigure-basin operation too).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			cfg := &api.BasinConfig{CreateStreamOnAppend: onAppend, CreateStreamOnRead: onRead}
			sc, err := defaults.config(cmd.Flags())
			if err != nil {
				return err
			}
			if sc != (api.StreamConfig{}) {
				cfg.DefaultStreamConfig = &sc
			}
			if cfg.Quotas, err = quotas.quotas(cmd.Flags()); err != nil {
				return err
			}
			info, err := cl.CreateBasin(cmd.Context(), args[0], cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created basin %s\n", info.Name)
			return nil
		},
	}
	create.Flags().BoolVar(&onAppend, "create-stream-on-append", false, "create a missing stream on its first append")
	create.Flags().BoolVar(&onRead, "create-stream-on-read", false, "create a missing stream on its first read")
	defaults.register(create.Flags())
	quotas.register(create.Flags())

	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Print a basin's config as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			cfg, err := cl.GetBasinConfig(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), cfg)
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a basin and all its streams",
		Long:  "Delete a basin. The server deletes it asynchronously, with all its streams.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.DeleteBasin(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleting basin %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(list, create, get, c.basinReconfigureCmd(), del)
	return cmd
}

func (c *conn) streamsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "streams",
		Short: "Manage the streams of a basin (list, create, get, delete, config)",
		Long: `Manage the streams of the basin named by --basin (or S2_BASIN).

Stream names are 1 to 512 bytes of UTF-8.`,
	}
	var prefix string
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List streams",
		Long:  "List every stream of the basin, or those whose name starts with --prefix: name, creation time, and whether it is being deleted.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := c.basinHandle()
			if err != nil {
				return err
			}
			var infos []api.StreamInfo
			for s, err := range b.AllStreams(cmd.Context(), prefix) {
				if err != nil {
					return err
				}
				infos = append(infos, s)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), infos)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, s := range infos {
				state := "active"
				if s.DeletedAt != nil {
					state = "deleting"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.CreatedAt.Format(time.RFC3339), state)
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&prefix, "prefix", "", "only streams whose name starts with this")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var createCfg streamConfigFlags
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a stream",
		Long: `Create a stream. Settings not given fall back to the basin's default
stream config, then to the built-in defaults (standard storage, 7-day
retention, client-prefer timestamps).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := c.basinHandle()
			if err != nil {
				return err
			}
			sc, err := createCfg.config(cmd.Flags())
			if err != nil {
				return err
			}
			info, err := b.CreateStream(cmd.Context(), args[0], &sc)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created stream %s\n", info.Name)
			return nil
		},
	}
	createCfg.register(create.Flags())

	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Print a stream's resolved config as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := c.basinHandle()
			if err != nil {
				return err
			}
			sc, err := b.GetStreamConfig(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), sc)
		},
	}

	var reCfg streamConfigFlags
	config := &cobra.Command{
		Use:   "config NAME",
		Short: "Show or change a stream's config",
		Long: `Without flags, print the stream's resolved config as JSON. With flags,
change those settings (the others keep their values) and print the result.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := c.basinHandle()
			if err != nil {
				return err
			}
			rc, changed, err := reCfg.reconfiguration(cmd.Flags())
			if err != nil {
				return err
			}
			var sc api.StreamConfig
			if changed {
				sc, err = b.ReconfigureStream(cmd.Context(), args[0], rc)
			} else {
				sc, err = b.GetStreamConfig(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), sc)
		},
	}
	reCfg.register(config.Flags())

	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a stream",
		Long:  "Delete a stream. The server deletes it asynchronously; its name can be reused at once.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := c.basinHandle()
			if err != nil {
				return err
			}
			if err := b.DeleteStream(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleting stream %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(list, create, get, config, del, c.moveCmd())
	return cmd
}

// streamConfigFlags are the flags of a stream config.
type streamConfigFlags struct {
	storageClass string
	retention    string
	timestamping string
	uncapped     bool
}

func (f *streamConfigFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.storageClass, "storage-class", "", "storage class: standard (cheaper, slower acks) or express (faster acks)")
	fs.StringVar(&f.retention, "retention", "", `retention: "infinite", or an age such as 7d, 12h or 3600s`)
	fs.StringVar(&f.timestamping, "timestamping", "", "timestamping mode: client-prefer, client-require or arrival")
	fs.BoolVar(&f.uncapped, "uncapped", false, "allow client timestamps later than arrival time")
}

// parseRetention parses "infinite" or an age: a Go duration, with "d" for
// days, or bare seconds.
func parseRetention(s string) (api.RetentionPolicy, error) {
	if s == "infinite" {
		return api.RetentionPolicy{Infinite: true}, nil
	}
	// Days and bare seconds become the age without a time.Duration, whose
	// product wraps past 292 years (a u32 of days fits a u64 of seconds).
	var d time.Duration
	switch {
	case strings.HasSuffix(s, "d"):
		n, err := strconv.ParseUint(strings.TrimSuffix(s, "d"), 10, 32)
		if err != nil {
			return api.RetentionPolicy{}, fmt.Errorf("retention %q: %w", s, err)
		}
		if n == 0 {
			return api.RetentionPolicy{}, fmt.Errorf("retention %q: the age must be a positive whole number of seconds", s)
		}
		return api.RetentionPolicy{AgeSecs: n * 24 * 3600}, nil
	default:
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			if n == 0 {
				return api.RetentionPolicy{}, fmt.Errorf("retention %q: the age must be a positive whole number of seconds", s)
			}
			return api.RetentionPolicy{AgeSecs: n}, nil
		}
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return api.RetentionPolicy{}, fmt.Errorf("retention %q: want infinite, or an age like 7d, 12h or 3600", s)
		}
	}
	if d < time.Second || d%time.Second != 0 {
		return api.RetentionPolicy{}, fmt.Errorf("retention %q: the age must be a positive whole number of seconds", s)
	}
	return api.RetentionPolicy{AgeSecs: uint64(d / time.Second)}, nil
}

func parseStorageClass(s string) (api.StorageClass, error) {
	switch c := api.StorageClass(s); c {
	case api.StorageStandard, api.StorageExpress:
		return c, nil
	}
	return "", fmt.Errorf("--storage-class must be standard or express, got %q", s)
}

func parseTimestamping(s string) (api.TimestampingMode, error) {
	switch m := api.TimestampingMode(s); m {
	case api.ClientPrefer, api.ClientRequire, api.Arrival:
		return m, nil
	}
	return "", fmt.Errorf("--timestamping must be client-prefer, client-require or arrival, got %q", s)
}

// config is the stream config the set flags describe.
func (f *streamConfigFlags) config(fs *pflag.FlagSet) (api.StreamConfig, error) {
	var sc api.StreamConfig
	if fs.Changed("storage-class") {
		c, err := parseStorageClass(f.storageClass)
		if err != nil {
			return sc, err
		}
		sc.StorageClass = &c
	}
	if fs.Changed("retention") {
		p, err := parseRetention(f.retention)
		if err != nil {
			return sc, err
		}
		sc.RetentionPolicy = &p
	}
	if fs.Changed("timestamping") || fs.Changed("uncapped") {
		sc.Timestamping = &api.TimestampingConfig{}
		if fs.Changed("timestamping") {
			m, err := parseTimestamping(f.timestamping)
			if err != nil {
				return sc, err
			}
			sc.Timestamping.Mode = &m
		}
		if fs.Changed("uncapped") {
			sc.Timestamping.Uncapped = &f.uncapped
		}
	}
	return sc, nil
}

// reconfiguration is the patch the set flags describe, and whether any
// was set.
func (f *streamConfigFlags) reconfiguration(fs *pflag.FlagSet) (api.StreamReconfiguration, bool, error) {
	var rc api.StreamReconfiguration
	sc, err := f.config(fs)
	if err != nil {
		return rc, false, err
	}
	if sc.StorageClass != nil {
		rc.StorageClass = api.SetTo(*sc.StorageClass)
	}
	if sc.RetentionPolicy != nil {
		rc.RetentionPolicy = api.SetTo(*sc.RetentionPolicy)
	}
	if ts := sc.Timestamping; ts != nil {
		var tr api.TimestampingReconfiguration
		if ts.Mode != nil {
			tr.Mode = api.SetTo(*ts.Mode)
		}
		if ts.Uncapped != nil {
			tr.Uncapped = api.SetTo(*ts.Uncapped)
		}
		rc.Timestamping = api.SetTo(tr)
	}
	changed := rc.StorageClass.Set || rc.RetentionPolicy.Set || rc.Timestamping.Set
	return rc, changed, nil
}
