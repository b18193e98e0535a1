package clientcmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// clusterStatus is the answer of GET /v1/starlog/status (star/server's
// ClusterStatus), decoded here without importing the server.
type clusterStatus struct {
	Via   string `json:"via"`
	Stars []struct {
		ID             string `json:"id"`
		Address        string `json:"address"`
		Incarnation    uint64 `json:"incarnation"`
		State          string `json:"state"`
		HeartbeatAgeMs int64  `json:"heartbeat_age_ms"`
		Leads          int    `json:"leads"`
		Error          string `json:"error"`
		Local          *struct {
			Draining   bool `json:"draining"`
			StreamsLed int  `json:"streams_led"`
			Chains     []struct {
				Class            string  `json:"class"`
				Degraded         bool    `json:"degraded"`
				BacklogFlights   float64 `json:"backlog_flights"`
				AbsorbLagSeconds float64 `json:"absorb_lag_seconds"`
				SlotsInFlight    float64 `json:"slots_in_flight"`
				SettleLagSeconds float64 `json:"settle_lag_seconds"`
				TrimLagSeconds   float64 `json:"trim_lag_seconds"`
				UnsettledBytes   float64 `json:"unsettled_bytes"`
			} `json:"chains"`
			QuarantinedStreams *float64 `json:"quarantined_streams"`
			Auditor            *struct {
				PassesOK     float64 `json:"passes_ok"`
				PassesFailed float64 `json:"passes_failed"`
				JobsPending  float64 `json:"jobs_pending"`
			} `json:"auditor"`
		} `json:"local"`
	} `json:"stars"`
}

// statusCmd is `star status [--json]`.
func (c *conn) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster at a glance: stars, streams led, backlog, settlement",
		Long: `Show the cluster as the star at --endpoint sees it: every star in the
registry (live, draining, stopped, dead or decommissioned, with its
heartbeat's age), the streams each leads, and for each star that answers
its chains (one per storage class): backlog flights and absorb lag (the
age of the oldest flight not yet absorbed), slots in flight, settle and
trim lag, unsettled bytes, and whether the class is degraded; then the
settle quarantine and, where the auditor runs inside the star (star dev),
its passes and pending jobs. Each live star is asked for its own figures
(2 s each); one that does not answer is shown with the error. Needs the
cluster's internal key, like drain. --json prints the answer whole.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				var raw json.RawMessage
				if err := c.adminCall(cmd.Context(), http.MethodGet, "/v1/starlog/status", "", nil, &raw); err != nil {
					return err
				}
				out, err := json.MarshalIndent(raw, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), string(out))
				return err
			}
			var st clusterStatus
			if err := c.adminCall(cmd.Context(), http.MethodGet, "/v1/starlog/status", "", nil, &st); err != nil {
				return err
			}
			return printStatus(cmd.OutOrStdout(), st)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

func printStatus(out io.Writer, st clusterStatus) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "STAR\tSTATE\tINCARNATION\tHEARTBEAT\tSTREAMS LED\tADDRESS\n")
	for _, s := range st.Stars {
		state, led := s.State, fmt.Sprint(s.Leads)
		if s.Local != nil {
			led = fmt.Sprint(s.Local.StreamsLed)
			if s.Local.Draining && state == "live" {
				state = "draining"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s ago\t%s\t%s\n", s.ID, state, s.Incarnation, ageString(s.HeartbeatAgeMs), led, s.Address)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "CHAIN\tBACKLOG\tABSORB LAG\tSLOTS\tSETTLE LAG\tTRIM LAG\tUNSETTLED\tDEGRADED\n")
	var quarantined *float64
	var auditor []string
	for _, s := range st.Stars {
		switch {
		case s.Local == nil && s.Error != "":
			fmt.Fprintf(w, "%s/*\tno answer: %s\t\t\t\t\t\t\n", s.ID, s.Error)
			continue
		case s.Local == nil:
			continue
		}
		for _, ch := range s.Local.Chains {
			deg := "no"
			if ch.Degraded {
				deg = "YES"
			}
			fmt.Fprintf(w, "%s/%s\t%.0f\t%s\t%.0f\t%s\t%s\t%s\t%s\n", s.ID, ch.Class, ch.BacklogFlights, secs(ch.AbsorbLagSeconds),
				ch.SlotsInFlight, secs(ch.SettleLagSeconds), secs(ch.TrimLagSeconds), bytesString(ch.UnsettledBytes), deg)
		}
		if q := s.Local.QuarantinedStreams; q != nil && (quarantined == nil || *q > *quarantined) {
			quarantined = q
		}
		if a := s.Local.Auditor; a != nil {
			auditor = append(auditor, fmt.Sprintf("%s: %.0f passes ok, %.0f failed, %.0f jobs pending", s.ID, a.PassesOK, a.PassesFailed, a.JobsPending))
		}
	}
	fmt.Fprintln(w)
	if quarantined != nil {
		fmt.Fprintf(w, "quarantined streams: %.0f\n", *quarantined)
	} else {
		fmt.Fprintf(w, "quarantined streams: not known here (the auditor runs outside the stars: star settle quarantine list)\n")
	}
	if len(auditor) > 0 {
		fmt.Fprintf(w, "auditor (in the star): %s\n", strings.Join(auditor, "; "))
	}
	fmt.Fprintf(w, "(as seen by star %s)\n", st.Via)
	return w.Flush()
}

func ageString(ms int64) string {
	return time.Duration(ms * int64(time.Millisecond)).Round(100 * time.Millisecond).String()
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Millisecond).String()
}

func bytesString(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
