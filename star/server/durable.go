package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
)

// durableLive is the context of the Durable Streams face's live reads
// (long-poll, SSE; durable.Config.Session): the credential watch's, and
// the read counted in the sessions gauge (kind ds_live) until it ends.
// The face calls it once the read's offset is fixed.
func (s *Server) durableLive(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := s.credentialContext(r)
	live := s.sessions.WithLabelValues("ds_live")
	live.Inc()
	var once sync.Once
	return ctx, func() { once.Do(live.Dec); cancel() }
}

// serveDurable serves the Durable Streams face (star/durable) under its
// prefix. It authenticates as every other route does (the access token
// as Authorization: Bearer, how the protocol's clients send credentials)
// and leaves authorizing the operation on the stream to the handler.
// Deadlines as for S2 requests: a body must arrive within BodyReadTimeout
// and a response be out within RequestTimeout, plus the handler's longest
// wait for reads (long-poll, SSE).
func (s *Server) serveDurable(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	now := time.Now()
	budget := s.opts.RequestTimeout
	if r.Method == http.MethodGet {
		budget += s.ds.MaxWait()
	} else {
		_ = rc.SetReadDeadline(now.Add(s.opts.BodyReadTimeout))
		defer rc.SetReadDeadline(time.Time{})
	}
	_ = rc.SetWriteDeadline(now.Add(budget))
	defer rc.SetWriteDeadline(time.Time{})
	internal := s.keys.IsInternal(r.Header.Get(auth.HeaderInternal))
	if !internal {
		// A client's: forwarded, it would travel with the internal
		// credential the forwarder adds and act as the server.
		r.Header.Del(durable.HeaderServerRequest)
	}
	r = forwardedFrom(r, internal)
	if s.tracer != nil {
		// A server span per request, as on S2's routes: a child of the
		// client's traceparent or of the forwarding star's span.
		rec := &recorder{ResponseWriter: w}
		ctx, span := s.tracer.Start(tracing.Propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header)),
			"durable-streams "+methodLabel(r.Method), trace.WithSpanKind(trace.SpanKindServer))
		w, r = rec, r.WithContext(ctx)
		defer func() { s.endDurableSpan(span, r, rec.status) }()
	}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("durable handler panic", "method", r.Method, "path", r.URL.Path, "panic", p)
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	var p auth.Principal
	ctx := r.Context()
	switch {
	case r.Method == http.MethodOptions || s.ds.SelfAuthenticated(r):
		// A CORS preflight carries no credentials and has no effect; the
		// JWK Set is public, and a subscription's callback, ack and
		// release carry the wake token the handler checks itself.
		p = auth.Principal{}
	case r.Header.Get(durable.HeaderServerRequest) != "" && internal:
		// A peer's own request (a subscription's tail or wake event, a
		// fork's read of its source) forwarded for a stream this star
		// leads: it acts as the server, and may run the handler's peer
		// operations, which no client credential reaches.
		p = auth.AdminPrincipal()
		ctx = durable.WithServerRequest(ctx)
	case s.keys.IsOpen():
		s.authDecisions.WithLabelValues(authOpen).Inc()
		p = auth.AdminPrincipal()
	default:
		var result string
		var err *api.Error
		token := auth.Bearer(r.Header.Get("Authorization"))
		p, result, err = s.tokens.authenticate(r.Context(), token, s.authClient(r, internal))
		s.authDecisions.WithLabelValues(result).Inc()
		if err != nil {
			err = s.countFailedAuth(r, err)
			if err.RetryAfter > 0 {
				w.Header().Set(api.HeaderRetryAfter, strconv.FormatInt(max(int64((err.RetryAfter+time.Second-1)/time.Second), 1), 10))
			}
			s.ds.Refuse(w, r, err.Status, err.Message)
			return
		}
		if !p.Admin {
			// A subscription this request creates acts as this token
			// while it stands (tokenStands).
			ctx = durable.WithCredential(ctx, tokenCredential(s.keys.Hash(token)))
		}
	}
	r = r.WithContext(auth.WithPrincipal(ctx, p))
	proveConn(r)
	// The per-client rate, as on S2's routes: not for a preflight, nor for
	// a peer's forward (the star that took the request counted it).
	if s.clients != nil && r.Method != http.MethodOptions && r.Header.Get(HeaderForwardedBy) == "" {
		if wait, ok := s.takeClient(r); !ok {
			secs := int64((wait + time.Second - 1) / time.Second)
			w.Header().Set(api.HeaderRetryAfter, strconv.FormatInt(max(secs, 1), 10))
			s.ds.Refuse(w, r, http.StatusTooManyRequests, "this client's request rate limit is exceeded; retry")
			return
		}
	}
	s.ds.ServeHTTP(w, r)
}

// appended accounts an acknowledged S2 append of bytes metered bytes and
// tells the Durable Streams face's subscriptions about it.
func (s *Server) appended(basin, name string, bytes uint64) {
	s.usage.record(basin, useAppendOps, 1)
	s.usage.record(basin, useAppendBytes, float64(bytes))
	if s.ds != nil {
		s.ds.Appended(basin, name)
	}
}

// tokenCredential names one issued token among those ever issued under
// its id, for the subscriptions it creates: a digest of its keyed hash
// (the token row's), so a subscription row holds neither the token nor
// what verifies it.
func tokenCredential(keyedHash []byte) string {
	sum := sha256.Sum256(keyedHash)
	return hex.EncodeToString(sum[:16])
}

// tokenStands reports whether the token id with credential (tokenCredential)
// still exists and has not expired: a Durable Streams subscription it
// created wakes only while it does (durable.Config.TokenStands). It reads
// the token's row, at most once per wake; a revoked token, or another
// issued under the id since, does not stand.
func (s *Server) tokenStands(ctx context.Context, id, credential string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, tokenReadTimeout)
	defer cancel()
	k := meta.TokenKey(id)
	it, err := s.tokens.meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading access token %q: %w", id, err)
	}
	var row tokenRow
	if err := json.Unmarshal(it.Val, &row); err != nil {
		return false, fmt.Errorf("access token row %q: %w", id, err)
	}
	h, err := hex.DecodeString(row.Hash)
	if err != nil {
		return false, nil
	}
	got := tokenCredential(h)
	return subtle.ConstantTimeCompare([]byte(got), []byte(credential)) == 1 && !row.Expired(s.tokens.now()), nil
}
