package server

import (
	"net/http"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
)

// countOp counts a request that succeeded for the account-ops and
// basin-ops sets: the account's resources (basins, access tokens,
// locations, metrics) and a basin's streams and tails. A peer's forward is
// counted by the star the client reached, not again here.
func (s *Server) countOp(r *http.Request, rt route) {
	if r.Header.Get(HeaderForwardedBy) != "" {
		return
	}
	switch rt.kind {
	case routeBasins, routeBasin, routeTokens, routeToken, routeLocations, routeDefaultLocation,
		routeAccountMetrics, routeBasinMetrics, routeStreamMetrics:
		s.usage.recordAccount()
	case routeStreams, routeStream, routeTail:
		s.usage.record(r.Header.Get(api.HeaderBasin), useBasinOps, 1)
	}
}

var (
	accountSets = []string{api.SetActiveBasins, api.SetAccountOps}
	basinSets   = []string{api.SetStorage, api.SetAppendOps, api.SetReadOps, api.SetReadThroughput, api.SetAppendThroughput, api.SetBasinOps}
	streamSets  = []string{api.SetStorage}
)

// basinSeries maps a basin timeseries set to its usage kind and unit.
var basinSeries = map[string]struct {
	kind usageKind
	unit string
}{
	api.SetAppendOps:        {useAppendOps, api.UnitOperations},
	api.SetReadOps:          {useReadOps, api.UnitOperations},
	api.SetReadThroughput:   {useReadBytes, api.UnitBytes},
	api.SetAppendThroughput: {useAppendBytes, api.UnitBytes},
	api.SetBasinOps:         {useBasinOps, api.UnitOperations},
}

// maxActiveBasins bounds the active-basins label set.
const maxActiveBasins = 1000

// metricsAPI serves S2's metrics endpoints: storage from the metastore
// (what the stream refs cover), the timeseries sets from this star's own
// counts (usage.go), active basins from the basin listing.
func (s *Server) metricsAPI(w http.ResponseWriter, r *http.Request, rt route) {
	q, qerr := query(r)
	if qerr != nil {
		s.writeError(w, r, qerr)
		return
	}
	sets := accountSets
	switch rt.kind {
	case routeBasinMetrics, routeStreamMetrics:
		if err := api.ValidateBasinName(rt.name); err != nil {
			s.writeError(w, r, api.InPath(err))
			return
		}
		sets = basinSets
		if rt.kind == routeStreamMetrics {
			if err := api.ValidateStreamName(rt.stream); err != nil {
				s.writeError(w, r, api.InPath(err))
				return
			}
			sets = streamSets
		}
	}
	req, perr := api.ParseMetricSetRequest(q, sets...)
	if perr != nil {
		s.writeError(w, r, perr)
		return
	}
	now := s.usage.now()
	interval := req.Interval
	if interval == "" {
		interval = api.IntervalMinute
	}
	from, to := usageWindow(now, interval, req.Start, req.End)
	var m api.Metric
	switch {
	case req.Set == api.SetStorage:
		var n uint64
		var err error
		if rt.kind == routeStreamMetrics {
			n, err = s.n.StreamStorageBytes(r.Context(), rt.name, rt.stream)
		} else {
			n, err = s.n.BasinStorageBytes(r.Context(), rt.name)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		m.Gauge = &api.GaugeMetric{Name: api.SetStorage, Unit: api.UnitBytes, Values: []api.Point{{float64(now.Unix()), float64(n)}}}
	case req.Set == api.SetAccountOps:
		m.Accumulation = &api.AccumulationMetric{Name: req.Set, Unit: api.UnitOperations, Interval: interval, Values: s.usage.accountPoints(interval, from, to)}
	case req.Set == api.SetActiveBasins:
		names, err := s.activeBasins(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		m.Label = &api.LabelMetric{Name: req.Set, Values: names}
	default:
		if _, err := s.n.BasinConfig(r.Context(), rt.name); err != nil {
			s.writeError(w, r, err) // 404 for a basin that does not exist
			return
		}
		bs := basinSeries[req.Set]
		m.Accumulation = &api.AccumulationMetric{Name: req.Set, Unit: bs.unit, Interval: interval, Values: s.usage.basinPoints(rt.name, bs.kind, interval, from, to)}
	}
	writeJSON(w, http.StatusOK, api.MetricSetResponse{Values: []api.Metric{m}})
}

// activeBasins lists the live basins that have a stream (S2: every basin
// that had one during the period; starlog knows the present only), of
// those the token's basin set holds: a token scoped to some basins learns
// no other basin's name.
func (s *Server) activeBasins(r *http.Request) ([]string, error) {
	out := []string{}
	set := auth.FromContext(r.Context()).Scope.Basins
	prefix, ok := set.Narrow("")
	if !ok {
		return out, nil
	}
	l, err := s.n.ListBasins(r.Context(), api.ListRequest{Prefix: prefix, Limit: maxActiveBasins})
	if err != nil {
		return nil, err
	}
	for _, b := range l.Basins {
		if b.DeletedAt != nil || !set.Contains(b.Name) {
			continue
		}
		st, err := s.n.ListStreams(r.Context(), b.Name, api.ListRequest{Limit: 1})
		if err != nil {
			continue // deleted meanwhile
		}
		if len(st.Streams) > 0 {
			out = append(out, b.Name)
		}
	}
	return out, nil
}
