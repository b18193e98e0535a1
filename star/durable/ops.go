package durable

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/peer"
	"github.com/starlog/starlog/star/durable/records"
	"github.com/starlog/starlog/star/node"
)

// The protocol's headers.
const (
	hStreamTTL       = "Stream-TTL"
	hStreamRetention = "Stream-Retention-Seconds" // starlog's: the protocol names none
	hStreamExpiresAt = "Stream-Expires-At"
	hStreamClosed    = "Stream-Closed"
	hStreamNext      = "Stream-Next-Offset"
	hStreamUpToDate  = "Stream-Up-To-Date"
	hStreamCursor    = "Stream-Cursor"
	hStreamSeq       = "Stream-Seq"
	hForkedFrom      = "Stream-Forked-From"
	hForkOffset      = "Stream-Fork-Offset"
	hForkSubOffset   = "Stream-Fork-Sub-Offset"
	hProducerID      = "Producer-Id"
	hProducerEpoch   = "Producer-Epoch"
	hProducerSeq     = "Producer-Seq"
	hExpectedSeq     = "Producer-Expected-Seq"
	hReceivedSeq     = "Producer-Received-Seq"
	hSSEEncoding     = "Stream-Sse-Data-Encoding"
)

// closedHeader reports Stream-Closed: only "true", case-insensitively;
// any other value is as if absent (protocol §4.1).
func closedHeader(r *http.Request) bool {
	return strings.EqualFold(strings.TrimSpace(r.Header.Get(hStreamClosed)), "true")
}

// parseUintStrict reads a non-negative decimal without sign, leading
// zeros, point or exponent (Stream-TTL's rule; also the producer numbers).
func parseUintStrict(s string, max uint64) (uint64, bool) {
	if s == "" || len(s) > 20 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && n <= max
}

// maxSafeInt is 2^53-1, the producer numbers' bound (JavaScript).
const maxSafeInt = 1<<53 - 1

// MaxStreamTTLSecs is the largest Stream-TTL a PUT takes, 400 past it:
// the most whole seconds a time.Duration holds (about 292 years). A
// larger TTL once wrapped negative and the stream expired at the next
// request, its PUT's body acknowledged (issue 26).
const MaxStreamTTLSecs = api.MaxDurationSecs

// parseStreamTTL reads the Stream-TTL header's values: one, at most
// MaxStreamTTLSecs.
func parseStreamTTL(v []string) (uint64, bool) {
	if len(v) != 1 {
		return 0, false
	}
	return parseUintStrict(v[0], MaxStreamTTLSecs)
}

// parseStreamRetention reads the Stream-Retention-Seconds header's
// values: one, in Stream-TTL's form, above 0. Any u64 is taken: it is the
// starlog stream's retention_policy.age, stored as given and applied
// saturating (api.Seconds), as the S2 API takes an age.
func parseStreamRetention(v []string) (uint64, bool) {
	if len(v) != 1 {
		return 0, false
	}
	n, ok := parseUintStrict(v[0], math.MaxUint64)
	return n, ok && n > 0
}

// streamConfig is the starlog stream config a Durable Streams row asks
// for: its retention age when the PUT gave one, else nothing (the basin's
// default stream config applies).
func streamConfig(row *streamRow) api.StreamConfig {
	if row.RetentionSecs == 0 {
		return api.StreamConfig{}
	}
	return api.StreamConfig{RetentionPolicy: &api.RetentionPolicy{AgeSecs: row.RetentionSecs}}
}

// expired reports whether the row's TTL or expiry has passed; a read or
// write (touch) restarts a sliding TTL, on this star (see the docs).
func (h *Handler) expired(name string, row *streamRow, now time.Time) bool {
	if t, ok := row.expiresAt(); ok && !now.Before(t) {
		return true
	}
	if row.HasTTL {
		// Without a touch seen by this star (it restarted, or took the
		// stream over), the window runs from this star's start: a stream
		// never expires earlier than its TTL says.
		last := row.Created
		if last.Before(h.started) {
			last = h.started
		}
		if v, ok := h.touched.Load(name + "\x00" + row.Incarnation); ok {
			last = v.(time.Time)
		}
		// Saturating: a row stored before MaxStreamTTLSecs was checked
		// may hold up to 2^62.
		return now.Sub(last) >= api.Seconds(row.TTLSecs)
	}
	return false
}

// expiredAnywhere is expired for a stream this star may not lead (a
// fork's source, a source's fork). A sliding TTL is reset in the memory
// of the star that serves the stream's reads and writes, its leader: when
// this star would call the stream expired by its TTL while another star
// leads it, that star judges, by a HEAD through it (which expires the
// stream there if so: 404). A leader that does not answer keeps the
// stream. An absolute expiry is judged here: every star's clock says the
// same.
func (h *Handler) expiredAnywhere(ctx context.Context, name string, row *streamRow) bool {
	now := h.cfg.Clock()
	if !h.expired(name, row, now) {
		return false
	}
	if t, ok := row.expiresAt(); ok && !now.Before(t) {
		return true
	}
	if h.n.LeaderOf(ctx, h.basin, name) == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, peer.Timeout)
	defer cancel()
	return h.internal(ctx, http.MethodHead, name, "", nil).Status == http.StatusNotFound
}

// created answers 201 for a stream just created at next (a create or a
// fork), marking it touched for its sliding TTL.
func (h *Handler) created(w http.ResponseWriter, r *http.Request, name string, row *streamRow, next uint64, closed bool) {
	h.touch(name, row)
	w.Header().Set("Location", absoluteURL(r))
	w.Header().Set("Content-Type", row.ContentType)
	w.Header().Set(hStreamNext, offsets.Format(next))
	setTTLHeaders(w, row)
	if closed {
		w.Header().Set(hStreamClosed, "true")
	}
	w.WriteHeader(http.StatusCreated)
}

func (h *Handler) touch(name string, row *streamRow) {
	if row.HasTTL {
		h.touched.Store(name+"\x00"+row.Incarnation, h.cfg.Clock())
	}
}

// liveRow returns the row of a stream a client may use: 404 when there is
// none or it expired (then it is deleted), 410 when soft-deleted.
func (h *Handler) liveRow(ctx context.Context, w http.ResponseWriter, name string) (streamRow, int64, bool) {
	row, ver, err := h.getRow(ctx, name)
	if err != nil {
		h.writeErr(w, err)
		return row, 0, false
	}
	if row.SoftDeleted {
		httpError(w, http.StatusGone, "stream was deleted (its forks still read it)")
		return row, 0, false
	}
	if h.expired(name, &row, h.cfg.Clock()) {
		h.expire(ctx, name, row, ver)
		httpError(w, http.StatusNotFound, "stream not found (expired)")
		return row, 0, false
	}
	return row, ver, true
}

// setTTLHeaders echoes the stream's lifetime headers: TTL or expiry, and
// the retention age its PUT gave.
func setTTLHeaders(w http.ResponseWriter, row *streamRow) {
	if row.HasTTL {
		w.Header().Set(hStreamTTL, strconv.FormatUint(row.TTLSecs, 10))
	}
	if row.RetentionSecs > 0 {
		w.Header().Set(hStreamRetention, strconv.FormatUint(row.RetentionSecs, 10))
	}
	if row.ExpiresAt != "" {
		w.Header().Set(hStreamExpiresAt, row.ExpiresAt)
	}
}

// create serves PUT: create, or 200 when the stream exists with the same
// config and closure, or a fork (fork.go).
func (h *Handler) create(w http.ResponseWriter, r *http.Request, name string) {
	ctx := r.Context()
	want := streamRow{ContentType: r.Header.Get("Content-Type")}
	if v := r.Header.Values(hStreamTTL); len(v) > 0 {
		n, ok := parseStreamTTL(v)
		if !ok {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("Stream-TTL must be a non-negative integer of at most %d (seconds), without sign or leading zeros", MaxStreamTTLSecs))
			return
		}
		want.TTLSecs, want.HasTTL = n, true
	}
	if v := r.Header.Get(hStreamExpiresAt); v != "" {
		if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
			httpError(w, http.StatusBadRequest, "Stream-Expires-At must be an RFC 3339 timestamp")
			return
		}
		want.ExpiresAt = v
	}
	if want.HasTTL && want.ExpiresAt != "" {
		httpError(w, http.StatusBadRequest, "Stream-TTL and Stream-Expires-At are exclusive")
		return
	}
	if v := r.Header.Values(hStreamRetention); len(v) > 0 {
		n, ok := parseStreamRetention(v)
		if !ok {
			httpError(w, http.StatusBadRequest, hStreamRetention+" must be one integer of seconds above 0, without sign or leading zeros")
			return
		}
		want.RetentionSecs = n
	}
	closed := closedHeader(r)
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if r.Header.Get(hForkedFrom) == "" && (r.Header.Get(hForkOffset) != "" || r.Header.Get(hForkSubOffset) != "") {
		httpError(w, http.StatusBadRequest, "Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From")
		return
	}
	if r.Header.Get(hForkedFrom) != "" {
		h.fork(w, r, name, want, closed, body)
		return
	}
	if want.ContentType == "" {
		want.ContentType = "application/octet-stream"
	}
	var payload [][]byte
	if isJSON(want.ContentType) {
		if len(body) > 0 {
			msgs, err := records.JSONMessages(body, true)
			if err != nil {
				httpError(w, http.StatusBadRequest, err.Error())
				return
			}
			payload = msgs
		}
	} else if len(body) > 0 {
		payload = [][]byte{body}
	}
	for range 4 {
		row, _, err := h.getRow(ctx, name)
		if err == nil {
			h.existing(w, r, name, row, want, closed)
			return
		}
		if !errors.Is(err, errNoRow) {
			h.writeErr(w, err)
			return
		}
		want.Incarnation = newIncarnation()
		want.Created = h.cfg.Clock().UTC()
		if _, err := h.putRow(ctx, name, want, meta.IfAbsent()); errors.Is(err, meta.ErrConditionFailed) {
			continue // created meanwhile: compare with it
		} else if err != nil {
			h.writeErr(w, err)
			return
		}
		next, err := h.initStream(ctx, name, &want, payload, closed)
		if err != nil {
			h.writeErr(w, err)
			return
		}
		h.created(w, r, name, &want, next, closed)
		return
	}
	httpError(w, http.StatusServiceUnavailable, "stream is being created and deleted concurrently; retry")
}

// initStream creates the starlog stream of a new row and appends the
// initial records; it returns the tail.
func (h *Handler) initStream(ctx context.Context, name string, row *streamRow, payload [][]byte, closed bool) (uint64, error) {
	// An existing starlog stream (made through the S2 API) keeps its
	// config and records: this PUT gives it its Durable Streams face.
	// Its retention age, when the PUT gave one, is set on it either way.
	if _, err := h.n.CheckTail(ctx, h.basin, name, nil); isStatus(err, http.StatusNotFound) || isStatus(err, http.StatusConflict) {
		if _, _, err := h.n.EnsureStream(node.ReplaceDeleting(ctx), h.basin, name, streamConfig(row)); err != nil {
			return 0, err
		}
	} else if err != nil {
		return 0, err
	} else if row.RetentionSecs > 0 {
		rp := api.RetentionPolicy{AgeSecs: row.RetentionSecs}
		if _, err := h.n.ReconfigureStream(ctx, h.basin, name, api.StreamReconfiguration{RetentionPolicy: api.SetTo(rp)}); err != nil {
			return 0, err
		}
	}
	h.states.drop(name)
	if len(payload) == 0 && !closed {
		pos, err := h.n.CheckTail(ctx, h.basin, name, nil)
		return pos.SeqNum, err
	}
	s, err := h.state(ctx, name, row)
	if err != nil {
		return 0, err
	}
	ack, err := h.n.Append(ctx, h.basin, name, &api.AppendInput{
		Records: records.Batch(payload, nil, "", closed), MatchSeqNum: api.Uint64(s.Next),
	}, nil)
	if err != nil {
		return 0, err
	}
	if closed {
		h.recordClose(ctx, name, row.Incarnation, ack.End.SeqNum)
	}
	return ack.End.SeqNum, nil
}

// existing answers a PUT on a stream that exists: 200 when the config and
// closure match, else 409.
func (h *Handler) existing(w http.ResponseWriter, r *http.Request, name string, row, want streamRow, closed bool) {
	if row.SoftDeleted {
		httpError(w, http.StatusConflict, "a deleted stream with live forks holds this path")
		return
	}
	if h.expired(name, &row, h.cfg.Clock()) {
		// An expired stream is gone: remove it and create anew.
		if h.liveForks(r.Context(), name, &row) > 0 {
			httpError(w, http.StatusConflict, "an expired stream with live forks holds this path")
			return
		}
		if err := h.remove(r.Context(), name, row, 0); err != nil && !errors.Is(err, errNoRow) {
			h.writeErr(w, err)
			return
		}
		h.create(w, r, name)
		return
	}
	s, err := h.state(r.Context(), name, &row)
	if err != nil {
		h.writeErr(w, err)
		return
	}
	if mediaType(row.ContentType) != mediaType(want.ContentType) || row.HasTTL != want.HasTTL ||
		row.TTLSecs != want.TTLSecs || !sameInstant(row.ExpiresAt, want.ExpiresAt) || row.RetentionSecs != want.RetentionSecs ||
		s.Closed != closed || row.ForkedFrom != "" {
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

func sameInstant(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	ta, err1 := time.Parse(time.RFC3339Nano, a)
	tb, err2 := time.Parse(time.RFC3339Nano, b)
	return err1 == nil && err2 == nil && ta.Equal(tb)
}

// head serves HEAD: the metadata, never cached, without touching the TTL.
func (h *Handler) head(w http.ResponseWriter, r *http.Request, name string) {
	row, _, ok := h.liveRow(r.Context(), w, name)
	if !ok {
		return
	}
	s, err := h.state(r.Context(), name, &row)
	if err != nil {
		h.writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", row.ContentType)
	w.Header().Set(hStreamNext, offsets.Format(s.End()))
	w.Header().Set("Cache-Control", "no-store")
	setTTLHeaders(w, &row)
	if s.Closed {
		w.Header().Set(hStreamClosed, "true")
	}
	w.WriteHeader(http.StatusOK)
}

// expire removes an expired stream, or soft-deletes it while it has live
// forks (they read its records).
func (h *Handler) expire(ctx context.Context, name string, row streamRow, ver int64) {
	if h.liveForks(ctx, name, &row) > 0 {
		_, _ = h.updateRow(ctx, name, func(rw *streamRow) error { rw.SoftDeleted = true; return nil })
		return
	}
	if err := h.remove(ctx, name, row, ver); err != nil && !errors.Is(err, errNoRow) {
		h.log.Warn("delete expired stream", "stream", name, "err", err)
	}
}

// delete serves DELETE: a stream with live forks is soft-deleted (410 from
// then on); any other is removed, and so is a soft-deleted source whose
// last fork this was. Counting the forks may change the row (a fork that
// expired unseen is removed and releases it): then it is judged again.
func (h *Handler) delete(w http.ResponseWriter, r *http.Request, name string) {
	ctx := r.Context()
	for range 4 {
		row, ver, ok := h.liveRow(ctx, w, name)
		if !ok {
			return
		}
		if h.liveForks(ctx, name, &row) > 0 {
			_, err := h.updateRow(ctx, name, func(rw *streamRow) error {
				if rw.Incarnation != row.Incarnation {
					return errNoRow
				}
				rw.SoftDeleted = true
				return nil
			})
			if err != nil {
				h.writeErr(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if err := h.remove(ctx, name, row, ver); errors.Is(err, errNoRow) {
			continue // the row changed since it was read
		} else if err != nil {
			h.writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	httpError(w, http.StatusServiceUnavailable, "stream is changing concurrently; retry")
}

// remove deletes the stream's row and its starlog stream, then releases
// its fork source (cascading to a soft-deleted source with no forks
// left). ver 0 deletes whatever version the row has.
func (h *Handler) remove(ctx context.Context, name string, row streamRow, ver int64) error {
	k := rowKey(h.basin, name)
	cond := meta.IfVer(ver)
	if ver == 0 {
		cond = meta.Always()
	}
	if err := h.meta.Delete(ctx, k.PK, k.SK, cond); errors.Is(err, meta.ErrConditionFailed) {
		return errNoRow
	} else if err != nil {
		return err
	}
	h.states.drop(name)
	h.rows.Delete(name)
	h.touched.Delete(name + "\x00" + row.Incarnation)
	h.dropCheckpoint(ctx, name)
	if err := h.peers().DeleteStream(ctx, name); err != nil && !isStatus(err, http.StatusNotFound) {
		h.log.Warn("delete starlog stream", "stream", name, "err", err)
	}
	for src := row.ForkedFrom; src != ""; {
		child := name
		srow, err := h.updateRow(ctx, src, func(rw *streamRow) error {
			rw.Forks = slices.DeleteFunc(rw.Forks, func(f string) bool { return f == child })
			return nil
		})
		if err != nil {
			if !errors.Is(err, errNoRow) {
				h.log.Warn("release fork source", "source", src, "err", err)
			}
			return nil
		}
		if !srow.SoftDeleted || len(srow.Forks) > 0 {
			return nil
		}
		k := rowKey(h.basin, src)
		if err := h.meta.Delete(ctx, k.PK, k.SK, meta.Always()); err != nil {
			return nil
		}
		h.states.drop(src)
		h.rows.Delete(src)
		h.dropCheckpoint(ctx, src)
		if err := h.peers().DeleteStream(ctx, src); err != nil && !isStatus(err, http.StatusNotFound) {
			h.log.Warn("delete starlog stream", "stream", src, "err", err)
		}
		name, src = src, srow.ForkedFrom
	}
	return nil
}

// liveForks counts the forks of a stream that still exist, removing the
// ones that expired unseen (their expiry releases the source).
func (h *Handler) liveForks(ctx context.Context, name string, row *streamRow) int {
	n := 0
	for _, f := range row.Forks {
		frow, fver, err := h.getRow(ctx, f)
		if errors.Is(err, errNoRow) || (err == nil && frow.ForkedFrom != name) {
			continue
		}
		if err == nil && !frow.SoftDeleted && len(frow.Forks) == 0 && h.expiredAnywhere(ctx, f, &frow) {
			if h.remove(ctx, f, frow, fver) == nil {
				continue
			}
			if _, _, err := h.getRow(ctx, f); errors.Is(err, errNoRow) {
				continue // its leader removed it (expiredAnywhere)
			}
		}
		n++
	}
	if n == 0 && len(row.Forks) > 0 {
		if nr, err := h.updateRow(ctx, name, func(rw *streamRow) error {
			rw.Forks = slices.DeleteFunc(rw.Forks, func(f string) bool {
				fr, _, err := h.getRow(ctx, f)
				return errors.Is(err, errNoRow) || (err == nil && fr.ForkedFrom != name)
			})
			return nil
		}); err == nil {
			*row = nr
			return len(nr.Forks)
		}
	}
	return n
}

// absoluteURL is the request's own URL, absolute (Location of a 201).
func absoluteURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.URL.EscapedPath()
}
