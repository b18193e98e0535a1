package clientcmd

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/api"
)

// quotaFlags are a basin's quota flags (api.BasinQuotas, starlog's
// extension): each a number, or "none" to unset it (unlimited).
type quotaFlags struct{ stored, rate, streams string }

const (
	flagQuotaStored  = "quota-stored-bytes"
	flagQuotaRate    = "quota-append-bytes-per-sec"
	flagQuotaStreams = "quota-streams"
)

func (q *quotaFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&q.stored, flagQuotaStored, "", `most metered bytes the basin's streams may retain; appends are refused (403 quota_exhausted) at or over it ("none": unlimited)`)
	fs.StringVar(&q.rate, flagQuotaRate, "", `most metered bytes per second appended to the basin, summed over the stars ("none": unlimited)`)
	fs.StringVar(&q.streams, flagQuotaStreams, "", `most live streams in the basin; a create past it is refused ("none": unlimited)`)
}

// patch is the quotas reconfiguration the flags given on the command
// line ask for; set is false when none was given.
func (q *quotaFlags) patch(fs *pflag.FlagSet) (p api.BasinQuotasReconfiguration, set bool, err error) {
	for _, f := range []struct {
		name, v string
		dst     *api.Patch[uint64]
	}{{flagQuotaStored, q.stored, &p.StoredBytes}, {flagQuotaRate, q.rate, &p.AppendBytesPerSec}, {flagQuotaStreams, q.streams, &p.Streams}} {
		if !fs.Changed(f.name) {
			continue
		}
		set = true
		if f.v == "none" {
			*f.dst = api.Unset[uint64]()
			continue
		}
		n, perr := strconv.ParseUint(f.v, 10, 64)
		if perr != nil {
			return p, false, fmt.Errorf("--%s: %q is not a whole number of at least 0 or \"none\"", f.name, f.v)
		}
		if n > api.MaxQuota {
			return p, false, fmt.Errorf("--%s: %d is over the most a quota may be, %d", f.name, n, api.MaxQuota)
		}
		*f.dst = api.SetTo(n)
	}
	return p, set, nil
}

// quotas are the quotas a new basin gets from the flags (nil: none).
func (q *quotaFlags) quotas(fs *pflag.FlagSet) (*api.BasinQuotas, error) {
	p, set, err := q.patch(fs)
	if err != nil || !set {
		return nil, err
	}
	return api.BasinConfig{}.Reconfigure(api.BasinReconfiguration{Quotas: api.SetTo(p)}).Quotas, nil
}

// basinReconfigureCmd is `star basins reconfigure`: for now, a basin's
// quotas.
func (c *conn) basinReconfigureCmd() *cobra.Command {
	var qf quotaFlags
	cmd := &cobra.Command{
		Use:   "reconfigure NAME",
		Short: "Change a basin's quotas",
		Long: `Change a basin's quotas (starlog's extension to S2's basin config):
stored bytes, append bytes per second (summed over every star) and live
streams. A flag not given keeps its quota; "none" removes one (unlimited);
0 admits nothing. Past a quota, appends or creates are refused with 403
quota_exhausted. It needs a token with the reconfigure-basin operation.
Prints the basin's config as JSON.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, set, err := qf.patch(cmd.Flags())
			if err != nil {
				return err
			}
			if !set {
				return fmt.Errorf("nothing to change: give --%s, --%s or --%s", flagQuotaStored, flagQuotaRate, flagQuotaStreams)
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			cfg, err := cl.ReconfigureBasin(cmd.Context(), args[0], api.BasinReconfiguration{Quotas: api.SetTo(p)})
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), cfg)
		},
	}
	qf.register(cmd.Flags())
	return cmd
}
