package durable

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/records"
	"github.com/starlog/starlog/star/node"
)

// A fork is copy-on-fork: creating it copies the source's records below
// the fork offset into the fork's own starlog stream, seq for seq (control
// records become pads), so the fork reads, tails and appends as any stream
// and its offsets are the source's. The source keeps the fork's name in
// its row until the fork is deleted (soft deletion, cascading GC).

// forkPoint is where a fork diverges: seq, and sub past it (bytes, or
// JSON messages, of the append found at or after seq).
type forkPoint struct {
	seq, sub uint64
}

// fork serves a PUT with Stream-Forked-From.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request, name string, want streamRow, closed bool, body []byte) {
	ctx := r.Context()
	src, ok := h.sourceName(r.Header.Get(hForkedFrom))
	if !ok || api.ValidateStreamName(src) != nil {
		httpError(w, http.StatusBadRequest, "malformed Stream-Forked-From")
		return
	}
	src = auth.FromContext(ctx).StreamName(src)
	// A fork copies the source's records: the caller must be able to read it.
	if aerr := auth.FromContext(ctx).Authorize(auth.Request{Op: auth.Read, Basin: h.basin, Stream: src}); aerr != nil {
		h.writeErr(w, aerr)
		return
	}
	var pt forkPoint
	offIn := r.Header.Get(hForkOffset)
	if offIn != "" {
		seq, ok := offsets.Parse(offIn)
		if !ok {
			httpError(w, http.StatusBadRequest, "malformed Stream-Fork-Offset")
			return
		}
		pt.seq = seq
	}
	if v := r.Header.Get(hForkSubOffset); v != "" {
		n, ok := parseUintStrict(v, maxSafeInt)
		if !ok {
			httpError(w, http.StatusBadRequest, "Stream-Fork-Sub-Offset must be a non-negative integer")
			return
		}
		if n > 0 && offIn == "" {
			httpError(w, http.StatusBadRequest, "Stream-Fork-Sub-Offset needs Stream-Fork-Offset")
			return
		}
		pt.sub = n
	}
	srow, sver, err := h.getRow(ctx, src)
	if errors.Is(err, errNoRow) {
		httpError(w, http.StatusNotFound, "source stream not found")
		return
	}
	if err != nil {
		h.writeErr(w, err)
		return
	}
	if srow.SoftDeleted {
		httpError(w, http.StatusConflict, "source stream was deleted")
		return
	}
	if h.expiredAnywhere(ctx, src, &srow) {
		h.expire(ctx, src, srow, sver)
		httpError(w, http.StatusNotFound, "source stream not found (expired)")
		return
	}
	if want.ContentType == "" {
		want.ContentType = srow.ContentType
	} else if mediaType(want.ContentType) != mediaType(srow.ContentType) {
		httpError(w, http.StatusConflict, "Content-Type differs from the source's "+srow.ContentType)
		return
	}
	if !want.HasTTL && want.ExpiresAt == "" {
		// Fork TTL/expiry table (protocol §4.2): inherit what the source has.
		want.HasTTL, want.TTLSecs, want.ExpiresAt = srow.HasTTL, srow.TTLSecs, srow.ExpiresAt
	}
	s, err := h.sourceState(ctx, src, &srow)
	if err != nil {
		h.writeErr(w, err)
		return
	}
	if offIn == "" {
		pt.seq = s.End()
	}
	if pt.seq > s.End() {
		httpError(w, http.StatusBadRequest, "Stream-Fork-Offset is past the source's tail")
		return
	}
	// The records to copy: everything below pt.seq, then the sub-offset's
	// part of the next append.
	var tailRecs []api.Record
	if pt.sub > 0 {
		var ok bool
		if tailRecs, ok, err = h.subRecords(ctx, src, &srow, pt); err != nil {
			h.writeErr(w, err)
			return
		} else if !ok {
			httpError(w, http.StatusBadRequest, "Stream-Fork-Sub-Offset is past the next append's end")
			return
		}
	}
	want.ForkedFrom, want.ForkOffset, want.ForkSub, want.ForkOffsetIn = src, pt.seq, pt.sub, offIn
	if row, _, err := h.getRow(ctx, name); err == nil {
		h.existingFork(w, r, name, row, want, closed)
		return
	} else if !errors.Is(err, errNoRow) {
		h.writeErr(w, err)
		return
	}
	var payload [][]byte
	if len(body) > 0 {
		payload = [][]byte{body}
		if isJSON(want.ContentType) {
			if payload, err = records.JSONMessages(body, true); err != nil {
				httpError(w, http.StatusBadRequest, err.Error())
				return
			}
		}
	}
	want.Incarnation = newIncarnation()
	want.Created = h.cfg.Clock().UTC()
	if _, err := h.putRow(ctx, name, want, meta.IfAbsent()); errors.Is(err, meta.ErrConditionFailed) {
		row, _, err := h.getRow(ctx, name)
		if err != nil {
			h.writeErr(w, err)
			return
		}
		h.existingFork(w, r, name, row, want, closed)
		return
	} else if err != nil {
		h.writeErr(w, err)
		return
	}
	// Register with the source before copying: a source deleted from now
	// on is soft-deleted and keeps its records for the copy.
	if _, err := h.updateRow(ctx, src, func(rw *streamRow) error {
		if rw.Incarnation != srow.Incarnation || rw.SoftDeleted {
			return errSourceGone
		}
		if !slices.Contains(rw.Forks, name) {
			rw.Forks = append(rw.Forks, name)
		}
		return nil
	}); err != nil {
		_ = h.deleteRowAny(ctx, name)
		if errors.Is(err, errSourceGone) || errors.Is(err, errNoRow) {
			httpError(w, http.StatusConflict, "source stream was deleted")
			return
		}
		h.writeErr(w, err)
		return
	}
	next, err := h.copyFork(ctx, src, name, &want, pt.seq, tailRecs, payload, closed)
	if err != nil {
		h.writeErr(w, err)
		return
	}
	h.created(w, r, name, &want, next, closed)
}

var errSourceGone = errors.New("durable: fork source deleted")

func (h *Handler) deleteRowAny(ctx context.Context, name string) error {
	k := rowKey(h.basin, name)
	h.rows.Delete(name)
	return h.meta.Delete(ctx, k.PK, k.SK, meta.Always())
}

// existingFork answers a fork PUT on a path in use: 200 when it is the
// same fork (source, offset, sub-offset, config), else 409.
func (h *Handler) existingFork(w http.ResponseWriter, r *http.Request, name string, row, want streamRow, closed bool) {
	if row.SoftDeleted {
		httpError(w, http.StatusConflict, "a deleted stream with live forks holds this path")
		return
	}
	s, err := h.state(r.Context(), name, &row)
	if err != nil {
		h.writeErr(w, err)
		return
	}
	if row.ForkedFrom != want.ForkedFrom || row.ForkOffset != want.ForkOffset || row.ForkSub != want.ForkSub ||
		mediaType(row.ContentType) != mediaType(want.ContentType) || row.HasTTL != want.HasTTL ||
		row.TTLSecs != want.TTLSecs || !sameInstant(row.ExpiresAt, want.ExpiresAt) || row.RetentionSecs != want.RetentionSecs || s.Closed != closed {
		httpError(w, http.StatusConflict, "stream exists with a different configuration")
		return
	}
	w.Header().Set("Content-Type", row.ContentType)
	w.Header().Set(hStreamNext, offsets.Format(s.End()))
	setTTLHeaders(w, &row)
	if s.Closed {
		w.Header().Set(hStreamClosed, "true")
	}
	w.WriteHeader(http.StatusOK)
}

// subRecords returns the records a sub-offset adds past pt.seq: the pads
// for control records before the next append, then the append's first
// pt.sub bytes (one record) or messages. ok is false when the sub-offset
// overshoots that append, or there is none.
func (h *Handler) subRecords(ctx context.Context, src string, srow *streamRow, pt forkPoint) ([]api.Record, bool, error) {
	b, err := h.peers().Read(ctx, src, api.ReadRequest{
		From: api.FromSeqNum, Value: pt.seq, Count: api.Uint64(foldBatch), Bytes: api.Uint64(maxReadBytes), Clamp: true,
	})
	if err != nil {
		if isStatus(err, http.StatusRequestedRangeNotSatisfiable) {
			return nil, false, nil
		}
		return nil, false, err
	}
	var out []api.Record
	for i := range b.Records {
		rec := &b.Records[i]
		if records.KindOf(rec) != records.KindData {
			if records.KindOf(rec) == records.KindClose {
				return nil, false, nil
			}
			out = append(out, records.ForkCopy(rec))
			continue
		}
		if isJSON(srow.ContentType) {
			n := uint64(records.BatchLen(rec))
			if pt.sub > n || uint64(len(b.Records)-i) < pt.sub {
				return nil, false, nil
			}
			for j := range int(pt.sub) {
				out = append(out, records.ForkCopy(&b.Records[i+j]))
			}
			return out, true, nil
		}
		if pt.sub > uint64(len(rec.Body)) {
			return nil, false, nil
		}
		c := records.ForkCopy(rec)
		c.Body = rec.Body[:pt.sub]
		return append(out, c), true, nil
	}
	return nil, false, nil
}

// copyFork creates the fork's starlog stream, copies the source's records
// below seq and then tailRecs, and appends the initial body (and marker);
// it returns the fork's tail.
func (h *Handler) copyFork(ctx context.Context, src, name string, row *streamRow, seq uint64, tailRecs []api.Record, payload [][]byte, closed bool) (uint64, error) {
	if _, _, err := h.n.EnsureStream(node.ReplaceDeleting(ctx), h.basin, name, streamConfig(row)); err != nil {
		return 0, err
	}
	h.states.drop(name)
	pos, err := h.n.CheckTail(ctx, h.basin, name, nil)
	if err != nil {
		return 0, err
	}
	next := pos.SeqNum // a retried fork resumes its copy
	appendRecs := func(recs []api.Record) error {
		for len(recs) > 0 {
			n := 0
			var bytes uint64
			for n < len(recs) && n < api.MaxBatchRecords {
				m := api.MeteredBytes(recs[n : n+1])
				if n > 0 && bytes+m > api.MaxBatchMeteredBytes {
					break
				}
				bytes += m
				n++
			}
			ack, err := h.n.Append(ctx, h.basin, name, &api.AppendInput{Records: recs[:n], MatchSeqNum: api.Uint64(next)}, nil)
			if err != nil {
				return err
			}
			next = ack.End.SeqNum
			recs = recs[n:]
		}
		return nil
	}
	for next < seq {
		b, err := h.peers().Read(ctx, src, api.ReadRequest{
			From: api.FromSeqNum, Value: next, Count: api.Uint64(min(foldBatch, seq-next)), Bytes: api.Uint64(maxReadBytes),
		})
		if err != nil {
			return 0, err
		}
		var recs []api.Record
		for i := range b.Records {
			rec := &b.Records[i]
			if rec.SeqNum >= seq {
				break
			}
			for next+uint64(len(recs)) < rec.SeqNum { // trimmed on the source
				recs = append(recs, records.ForkCopy(&api.Record{Headers: []api.Header{{Name: []byte(records.HdrPad)}}}))
			}
			recs = append(recs, records.ForkCopy(rec))
		}
		if len(recs) == 0 {
			break
		}
		if err := appendRecs(recs); err != nil {
			return 0, err
		}
	}
	if err := appendRecs(tailRecs); err != nil {
		return 0, err
	}
	if len(payload) > 0 || closed {
		if err := appendRecs(records.Batch(payload, nil, "", closed)); err != nil {
			return 0, err
		}
	}
	return next, nil
}
