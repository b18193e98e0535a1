package durable

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/records"
	"github.com/starlog/starlog/star/node"
)

// appendReq serves POST: append, append-and-close, or close.
func (h *Handler) appendReq(w http.ResponseWriter, r *http.Request, name string) {
	ctx := r.Context()
	closing := closedHeader(r)
	var prod *records.Producer
	ids, eps, sqs := r.Header.Values(hProducerID), r.Header.Values(hProducerEpoch), r.Header.Values(hProducerSeq)
	if len(ids)+len(eps)+len(sqs) > 0 {
		if len(ids) != 1 || len(eps) != 1 || len(sqs) != 1 || ids[0] == "" {
			httpError(w, http.StatusBadRequest, "Producer-Id, Producer-Epoch and Producer-Seq go together, once each, with a non-empty id")
			return
		}
		e, ok1 := parseUintStrict(eps[0], maxSafeInt)
		s, ok2 := parseUintStrict(sqs[0], maxSafeInt)
		if !ok1 || !ok2 {
			httpError(w, http.StatusBadRequest, "Producer-Epoch and Producer-Seq must be integers from 0 to 2^53-1")
			return
		}
		prod = &records.Producer{ID: ids[0], Epoch: e, Seq: s}
	}
	streamSeq := r.Header.Get(hStreamSeq)
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if len(body) == 0 && !closing {
		httpError(w, http.StatusBadRequest, "an append needs a body (only a close, Stream-Closed: true, may be empty)")
		return
	}
	row, _, ok := h.liveRow(ctx, w, name)
	if !ok {
		return
	}
	h.touch(name, &row)
	var payload [][]byte
	ct := r.Header.Get("Content-Type")
	if len(body) > 0 {
		if ct == "" {
			httpError(w, http.StatusBadRequest, "an append with a body needs a Content-Type")
			return
		}
	}

	unlock := h.states.lock(name)
	defer unlock()
	var match *uint64 // the sequencer's tail from the last 412, if ahead
	for range appendAttempts {
		s, err := h.settledState(ctx, name, &row)
		if err != nil {
			h.writeErr(w, err)
			return
		}
		at := s.Next
		if match != nil && *match > at {
			// S2 appends in flight (sequenced, not yet durable, so not
			// folded) are ahead: append after them. Every Durable Streams
			// append of the stream is serialized here, on its leader, so
			// those records are S2 data, which leave this state as it is.
			at = *match
		}
		match = nil
		// Precedence (protocol §5.2): closed, content type, sequence.
		if s.Closed {
			w.Header().Set(hStreamClosed, "true")
			w.Header().Set(hStreamNext, offsets.Format(s.End()))
			if prod != nil && s.ClosedBy != nil && *s.ClosedBy == *prod {
				producerHeaders(w, prod.Epoch, prod.Seq)
				w.WriteHeader(http.StatusNoContent)
				return
			}
			if len(body) == 0 && closing {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			httpError(w, http.StatusConflict, "stream is closed")
			return
		}
		if len(body) > 0 && payload == nil {
			if mediaType(ct) != mediaType(row.ContentType) {
				httpError(w, http.StatusConflict, "Content-Type does not match the stream's "+row.ContentType)
				return
			}
			if isJSON(row.ContentType) {
				msgs, err := records.JSONMessages(body, false)
				if err != nil {
					httpError(w, http.StatusBadRequest, err.Error())
					return
				}
				if len(msgs) > api.MaxBatchRecords-1 {
					httpError(w, http.StatusRequestEntityTooLarge, "at most 999 JSON messages per append")
					return
				}
				payload = msgs
			} else {
				payload = [][]byte{body}
			}
		}
		dup := false
		if prod != nil {
			ps, seen := s.Producers[prod.ID]
			switch {
			case seen && prod.Epoch < ps.Epoch:
				producerHeaders(w, ps.Epoch, ps.Seq)
				w.Header().Del(hProducerSeq)
				httpError(w, http.StatusForbidden, "stale producer epoch")
				return
			case !seen || prod.Epoch > ps.Epoch:
				if prod.Seq != 0 {
					if !seen {
						w.Header().Set(hExpectedSeq, "0")
						w.Header().Set(hReceivedSeq, strconv.FormatUint(prod.Seq, 10))
						httpError(w, http.StatusConflict, "a new producer starts at seq 0")
						return
					}
					httpError(w, http.StatusBadRequest, "a new epoch starts at seq 0")
					return
				}
			case prod.Seq <= ps.Seq:
				dup = true
			case prod.Seq > ps.Seq+1:
				w.Header().Set(hExpectedSeq, strconv.FormatUint(ps.Seq+1, 10))
				w.Header().Set(hReceivedSeq, strconv.FormatUint(prod.Seq, 10))
				httpError(w, http.StatusConflict, "producer sequence gap")
				return
			}
			if dup {
				producerHeaders(w, prod.Epoch, ps.Seq)
				w.Header().Set(hStreamNext, offsets.Format(s.End()))
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		if streamSeq != "" && streamSeq <= s.StreamSeq {
			httpError(w, http.StatusConflict, "Stream-Seq must increase")
			return
		}
		if len(payload) == 0 && !closing {
			httpError(w, http.StatusBadRequest, "nothing to append")
			return
		}
		ack, err := h.n.Append(ctx, h.basin, name, &api.AppendInput{
			Records: records.Batch(payload, prod, streamSeq, closing), MatchSeqNum: api.Uint64(at),
		}, nil)
		if e, ok := errors.AsType[*api.Error](err); ok && e.Status == http.StatusPreconditionFailed {
			if e.Code == api.CodeSeqNumMismatch {
				// Another writer appended: fold again, and aim past what
				// the sequencer holds.
				if exp, ok := e.ExpectedSeqNum(); ok {
					match = &exp
				}
				continue
			}
			// An S2 client fenced the stream (a fencing token): the
			// protocol's writers hold none, so nothing is appended.
			httpError(w, http.StatusConflict, "stream is fenced by an S2 fencing token")
			return
		}
		if err != nil {
			if _, nl := errors.AsType[*node.NotLeaderError](err); !nl {
				// Maybe sequenced: it can only land at seq at, and the next
				// decision waits until that seq is durable (pendingAt).
				h.states.setPending(name, at)
			}
			h.writeErr(w, err)
			return
		}
		w.Header().Set(hStreamNext, offsets.Format(ack.End.SeqNum))
		if closing {
			h.recordClose(ctx, name, row.Incarnation, ack.End.SeqNum)
			w.Header().Set(hStreamClosed, "true")
		}
		if prod != nil {
			producerHeaders(w, prod.Epoch, prod.Seq)
			if len(payload) > 0 {
				w.WriteHeader(http.StatusOK)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	httpError(w, http.StatusServiceUnavailable, "the stream kept moving under the append; retry")
}

func producerHeaders(w http.ResponseWriter, epoch, seq uint64) {
	w.Header().Set(hProducerEpoch, strconv.FormatUint(epoch, 10))
	w.Header().Set(hProducerSeq, strconv.FormatUint(seq, 10))
}

// pendingWait bounds how long an append waits for an earlier append of
// its stream whose outcome is unknown to become durable or not.
const pendingWait = 10 * time.Second

// settledState is state once no Durable Streams append of this star is
// in doubt: after an append that failed indefinitely (a timeout, a storage
// error) its batch may still become durable, at the seq it matched, so
// the fold first reaches past that seq. Only then may a decision jump past
// S2 batches in flight (the 412's expected seq): none of them is ours.
func (h *Handler) settledState(ctx context.Context, name string, row *streamRow) (*records.State, error) {
	s, err := h.state(ctx, name, row)
	if err != nil {
		return nil, err
	}
	at, ok := h.states.pending(name)
	if !ok {
		return s, nil
	}
	deadline := time.Now().Add(pendingWait)
	for s.Next <= at {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, api.Unavailable("an earlier append of this stream is still in doubt; retry")
		}
		// A read from the fold's end waits for that seq to be durable.
		if _, err := h.n.Read(ctx, h.basin, name, api.ReadRequest{
			From: api.FromSeqNum, Value: s.Next, Count: api.Uint64(1), Wait: &left,
		}, nil); err != nil && !isStatus(err, http.StatusRequestedRangeNotSatisfiable) {
			return nil, err
		}
		if s, err = h.state(ctx, name, row); err != nil {
			return nil, err
		}
	}
	h.states.clearPending(name, at)
	return s, nil
}
