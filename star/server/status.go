package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/lead"
)

// StatusPath is starlog's cluster status endpoint (`star status`):
// internal credential only.
const StatusPath = "/v1/starlog/status"

// peerStatusTimeout bounds each peer's answer to a cluster status: a
// star that does not answer in time is shown with its error.
const peerStatusTimeout = 2 * time.Second

// ClusterStatus is the answer of GET /v1/starlog/status: every star in
// the registry, with the figures of each one that answered.
type ClusterStatus struct {
	// Via is the star that answered (and asked the others).
	Via   string       `json:"via"`
	Stars []StarStatus `json:"stars"`
}

// StarStatus is one star: its registry row and, for a star that is not
// dead, its own figures (or why they are missing).
type StarStatus struct {
	lead.RegisteredStar
	Local *LocalStatus `json:"local,omitempty"`
	Error string       `json:"error,omitempty"`
}

// LocalStatus is what one star reports of itself, read from its own
// Prometheus metrics so that it says what /metrics says.
type LocalStatus struct {
	Star        string        `json:"star"`
	Incarnation uint64        `json:"incarnation"`
	Draining    bool          `json:"draining"`
	StreamsLed  int           `json:"streams_led"`
	Chains      []ChainStatus `json:"chains"`
	// QuarantinedStreams is the settle quarantine's size as this star's
	// in-process auditor last saw it (absent on stars without one: on AWS
	// the plan function publishes it to CloudWatch).
	QuarantinedStreams *float64 `json:"quarantined_streams,omitempty"`
	// Auditor is the in-process auditor's progress (star dev), absent
	// where the auditor runs on Lambda.
	Auditor *AuditorStatus `json:"auditor,omitempty"`
}

// ChainStatus is one storage class's chain on a star.
type ChainStatus struct {
	Class             string  `json:"class"`
	Degraded          bool    `json:"degraded"`
	BacklogFlights    float64 `json:"backlog_flights"`
	AbsorbLagSeconds  float64 `json:"absorb_lag_seconds"` // age of the oldest unabsorbed flight
	SlotsInFlight     float64 `json:"slots_in_flight"`
	SettleLagSeconds  float64 `json:"settle_lag_seconds"`
	TrimLagSeconds    float64 `json:"trim_lag_seconds"`
	UnsettledBytes    float64 `json:"unsettled_bytes"`
	AbsorbErrorsTotal float64 `json:"absorb_errors_total"`
}

// AuditorStatus is the in-process auditor's passes and queue.
type AuditorStatus struct {
	PassesOK     float64 `json:"passes_ok"`
	PassesFailed float64 `json:"passes_failed"`
	JobsPending  float64 `json:"jobs_pending"`
}

// status answers GET /v1/starlog/status: with ?scope=star this star's own
// figures, otherwise the cluster (the registry, and each star that is
// not dead asked for its own figures in parallel, each within
// peerStatusTimeout).
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	local, err := s.localStatus()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if r.URL.Query().Get("scope") == "star" {
		writeJSON(w, http.StatusOK, local)
		return
	}
	stars, err := s.n.Stars(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := ClusterStatus{Via: s.n.StarID(), Stars: make([]StarStatus, len(stars))}
	var wg sync.WaitGroup
	for i, st := range stars {
		out.Stars[i].RegisteredStar = st
		switch {
		case st.ID == s.n.StarID():
			out.Stars[i].Local = &local
		case st.State == "dead" || st.State == "stopped" || st.State == "decommissioned" || st.Address == "":
		default:
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(r.Context(), peerStatusTimeout)
				defer cancel()
				ls, err := s.peerStatus(ctx, st.Address)
				if err != nil {
					out.Stars[i].Error = err.Error()
					return
				}
				out.Stars[i].Local = ls
			})
		}
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, out)
}

// peerStatus asks the star at addr for its own figures.
func (s *Server) peerStatus(ctx context.Context, addr string) (*LocalStatus, error) {
	u, err := leaderURL(addr)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+StatusPath+"?scope=star", nil)
	if err != nil {
		return nil, err
	}
	if c := s.keys.Internal(); c != "" {
		req.Header.Set(auth.HeaderInternal, c)
	}
	res, err := s.fwd.peers.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", res.StatusCode, truncate(string(body), 200))
	}
	var ls LocalStatus
	if err := json.Unmarshal(body, &ls); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return &ls, nil
}

// localStatus reads this star's figures from its metrics registry.
func (s *Server) localStatus() (LocalStatus, error) {
	fams, err := s.n.Registry().Gather()
	if err != nil {
		return LocalStatus{}, fmt.Errorf("status: gather metrics: %w", err)
	}
	byName := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	// value sums the series of a gauge or counter whose labels include
	// the given pair (any series when label is empty); ok is false when
	// the metric is not exported here.
	value := func(name, label, want string) (float64, bool) {
		f := byName[name]
		if f == nil {
			return 0, false
		}
		var v float64
		for _, m := range f.GetMetric() {
			if label != "" && !hasLabel(m, label, want) {
				continue
			}
			switch {
			case m.Gauge != nil:
				v += m.GetGauge().GetValue()
			case m.Counter != nil:
				v += m.GetCounter().GetValue()
			}
		}
		return v, true
	}
	led, _ := value("starlog_leader_streams_led", "", "")
	ls := LocalStatus{Star: s.n.StarID(), Incarnation: s.n.Incarnation(), Draining: s.n.DrainStatus().Draining, StreamsLed: int(led)}
	for _, class := range []string{"standard", "express"} {
		c := ChainStatus{Class: class}
		deg, _ := value("starlog_storage_class_degraded", "class", class)
		c.Degraded = deg > 0
		c.BacklogFlights, _ = value("starlog_backlog_flights", "class", class)
		c.AbsorbLagSeconds, _ = value("starlog_backlog_age_seconds", "class", class)
		c.SlotsInFlight, _ = value("starlog_slots_in_flight", "class", class)
		c.SettleLagSeconds, _ = value("starlog_settle_lag_seconds", "class", class)
		c.TrimLagSeconds, _ = value("starlog_settle_trim_lag_seconds", "class", class)
		c.UnsettledBytes, _ = value("starlog_settle_unsettled_bytes", "class", class)
		c.AbsorbErrorsTotal, _ = value("starlog_absorb_errors_total", "class", class)
		ls.Chains = append(ls.Chains, c)
	}
	if q, ok := value("starlog_settle_quarantined_streams", "", ""); ok {
		ls.QuarantinedStreams = &q
	}
	if _, ok := byName["starlog_auditor_ticks_total"]; ok {
		var a AuditorStatus
		a.PassesOK, _ = value("starlog_auditor_ticks_total", "outcome", "ok")
		total, _ := value("starlog_auditor_ticks_total", "", "")
		a.PassesFailed = total - a.PassesOK
		a.JobsPending, _ = value("starlog_auditor_jobs_pending", "", "")
		ls.Auditor = &a
	}
	return ls, nil
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
