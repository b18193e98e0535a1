package sdktest

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// store is the in-memory state: basins, streams, records.
type store struct {
	mu     sync.Mutex
	basins map[string]*basin
	now    func() time.Time
}

type basin struct {
	info    api.BasinInfo
	cfg     api.BasinConfig
	streams map[string]*stream
}

type stream struct {
	info    api.StreamInfo
	cfg     api.StreamConfig
	records []api.Record
	token   string
	maxTS   uint64
	// notify is closed and replaced on every append: it wakes readers.
	notify chan struct{}
}

func newStore(now func() time.Time) *store {
	return &store{basins: map[string]*basin{}, now: now}
}

func (s *store) nowMS() uint64 { return uint64(s.now().UnixMilli()) }

// names returns the sorted keys of m with prefix, after startAfter, at
// most limit of them, and whether more remain.
func names[T any](m map[string]T, q api.ListRequest) ([]string, bool) {
	var out []string
	for k := range m {
		if strings.HasPrefix(k, q.Prefix) && k > q.StartAfter {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(out) > q.Limit {
		return out[:q.Limit], true
	}
	return out, false
}

func (st *stream) tail() api.StreamPosition {
	n := len(st.records)
	if n == 0 {
		return api.StreamPosition{}
	}
	return api.StreamPosition{SeqNum: uint64(n), Timestamp: *st.records[n-1].Timestamp}
}

// appendLocked applies one validated batch: the fencing check first, then
// match_seq_num, then timestamps per the stream's config, then commands.
func (s *store) appendLocked(b *basin, st *stream, in *api.AppendInput) (api.AppendAck, *api.Error) {
	if in.FencingToken != nil && *in.FencingToken != st.token {
		return api.AppendAck{}, api.FencingTokenMismatch(st.token)
	}
	next := uint64(len(st.records))
	if in.MatchSeqNum != nil && *in.MatchSeqNum != next {
		return api.AppendAck{}, api.SeqNumMismatch(next)
	}
	cfg := st.cfg.Resolve(b.cfg.DefaultStreamConfig)
	now := s.nowMS()
	recs := make([]api.Record, len(in.Records))
	token := st.token
	maxTS := st.maxTS
	for i := range in.Records {
		r := in.Records[i]
		var ts uint64
		switch {
		case cfg.TimestampingMode == api.Arrival || r.Timestamp == nil:
			if cfg.TimestampingMode == api.ClientRequire {
				return api.AppendAck{}, api.Invalid("record %d: the stream requires client timestamps", i)
			}
			ts = now
		default:
			ts = *r.Timestamp
			if !cfg.Uncapped && ts > now {
				ts = now
			}
		}
		ts = max(ts, maxTS)
		maxTS = ts
		cmd, _ := api.ParseCommand(&r) // validated by the decoder
		if cmd.Kind == api.Fence {
			token = cmd.FencingToken
		}
		r.SeqNum = next + uint64(i)
		r.Timestamp = api.Uint64(ts)
		recs[i] = r
	}
	st.records = append(st.records, recs...)
	st.token, st.maxTS = token, maxTS
	close(st.notify)
	st.notify = make(chan struct{})
	last := recs[len(recs)-1]
	return api.AppendAck{
		Start: api.StreamPosition{SeqNum: next, Timestamp: *recs[0].Timestamp},
		End:   api.StreamPosition{SeqNum: last.SeqNum + 1, Timestamp: *last.Timestamp},
		Tail:  st.tail(),
	}, nil
}

// startLocked resolves a read's start: the seq num it begins at, or a 416.
func startLocked(st *stream, req *api.ReadRequest) (uint64, *api.Error) {
	tail := st.tail()
	var start uint64
	switch req.From {
	case api.FromSeqNum:
		start = req.Value
		if start > tail.SeqNum {
			if !req.Clamp {
				return 0, api.RangeNotSatisfiable(tail)
			}
			start = tail.SeqNum
		}
	case api.FromTimestamp:
		if req.Value > tail.Timestamp && !req.Clamp {
			return 0, api.RangeNotSatisfiable(tail)
		}
		start = uint64(sort.Search(len(st.records), func(i int) bool {
			return *st.records[i].Timestamp >= req.Value
		}))
	default:
		start = tail.SeqNum - min(req.Value, tail.SeqNum)
	}
	if start == tail.SeqNum && !req.CanFollow() {
		return 0, api.RangeNotSatisfiable(tail)
	}
	return start, nil
}

// limits are what a read has left to return.
type limits struct {
	count *uint64
	bytes *uint64
	until *uint64
}

func (l *limits) done() bool {
	return (l.count != nil && *l.count == 0) || (l.bytes != nil && *l.bytes == 0)
}

// collectLocked returns the records from pos within the limits and at
// most one batch's worth, and whether until was reached.
func collectLocked(st *stream, pos uint64, l *limits) ([]api.Record, bool) {
	var out []api.Record
	var size uint64
	for i := pos; i < uint64(len(st.records)); i++ {
		r := st.records[i]
		if l.until != nil && *r.Timestamp >= *l.until {
			return out, true
		}
		m := r.MeteredSize()
		if len(out) == api.MaxBatchRecords || size+m > api.MaxBatchMeteredBytes {
			break
		}
		if l.count != nil && uint64(len(out)) >= *l.count {
			break
		}
		if l.bytes != nil && size+m > *l.bytes {
			break
		}
		out = append(out, r)
		size += m
	}
	if l.count != nil {
		*l.count -= uint64(len(out))
	}
	if l.bytes != nil {
		// A record bigger than what is left ends the read.
		if next := pos + uint64(len(out)); next < uint64(len(st.records)) && st.records[next].MeteredSize() > *l.bytes-size {
			*l.bytes = 0
		} else {
			*l.bytes -= size
		}
	}
	return out, false
}
