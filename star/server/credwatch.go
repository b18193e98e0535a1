package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
)

// A request that lives longer than a token check is trusted (S2S append
// and read sessions, SSE reads, long polls, the Durable Streams face's
// live reads) holds a credential watch: its token is checked again
// through tokenStore.verify, the path every request takes, whenever what
// the cache knows of it goes stale (at most TokenCacheTTL apart), and a
// timer fires at the token's expires_at. The watch cancels the session's
// context with the *api.Error a new request would get (401 authn for a
// revoked or expired token), and the session tells its client that error
// the way its protocol ends a session. So a session ends within
// TokenCacheTTL plus one metastore read of a revocation on any star, and
// never outlives expires_at.
//
// Cost: a check is one cache lookup; the checks of every session of a
// token fall due together (the cache entry they share goes stale) and
// share one metastore read (tokenStore.loadShared). A watch is two
// timers, no goroutine.
//
// The metastore-outage rule is the cache's: a token verified within
// TokenStaleIfError stays accepted while the metastore cannot answer. A
// watch also remembers when it last verified its token itself, so an
// emptied cache (tokenCacheMax) during an outage does not end a session
// either. Expiry ends it whatever the metastore does.
//
// The admin token and an open star have nothing to watch. A forwarded
// session is watched by the star that runs it (the stream's leader),
// which checks the client's token again as it checks every forwarded
// request: that star writes the session's frames and sequences its
// appends, so the end it decides is exact (the acks of what it took, then
// the error, and nothing applied after) and the forwarding star relays it
// to the client as any frame. Cut at the forwarding star instead, the
// client would see the connection drop with appends in flight whose fate
// it cannot learn.
type credWatch struct {
	s     *Server
	token string
	end   context.CancelCauseFunc

	mu       sync.Mutex
	check    *time.Timer
	expiry   *time.Timer
	verified time.Time // when this watch last saw the token read valid
	stopped  bool
}

// sessionContext is r's context for a long-lived request of S2's API:
// cancelled with errDraining on Drain, and with the request's credential
// error when its token is revoked or expires (see credWatch). Call the
// cancel function when the request ends.
func (s *Server) sessionContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(r.Context())
	stopDrain := context.AfterFunc(s.drain, func() { cancel(errDraining) })
	stopWatch := s.watchCredential(r, cancel)
	return ctx, func() { stopDrain(); stopWatch(); cancel(context.Canceled) }
}

// credentialContext is r's context cancelled with the request's
// credential error when its token is revoked or expires: the Durable
// Streams face's live reads (durable.Config.Session).
func (s *Server) credentialContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(r.Context())
	stopWatch := s.watchCredential(r, cancel)
	return ctx, func() { stopWatch(); cancel(context.Canceled) }
}

// credentialErr is the credential error a session's context was
// cancelled with (sessionContext), or nil.
func credentialErr(ctx context.Context) *api.Error {
	if ctx.Err() == nil {
		return nil
	}
	e, _ := context.Cause(ctx).(*api.Error)
	return e
}

// watchCredential starts the watch of r's token, which calls end with
// the token's error; it returns the function that stops it.
func (s *Server) watchCredential(r *http.Request, end context.CancelCauseFunc) (stop func()) {
	p := auth.FromContext(r.Context())
	token := auth.Bearer(r.Header.Get("Authorization"))
	if s.keys.IsOpen() || p.Admin || token == "" {
		return func() {}
	}
	// The request was just authenticated, from the cache or a read: this
	// finds when that was, and the first check is due when it goes stale.
	_, _, at, err := s.tokens.verify(r.Context(), token, "")
	if err != nil {
		end(err)
		return func() {}
	}
	now := s.tokens.now()
	w := &credWatch{s: s, token: token, end: end, verified: at}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.ExpiresAt != nil {
		id := p.ID
		w.expiry = time.AfterFunc(p.ExpiresAt.Sub(now), func() { end(expiredErr(id)) })
	}
	w.check = time.AfterFunc(w.due(at, now), w.run)
	return w.stop
}

// due is how long until the next check: when the cache entry read at at
// goes stale, or a whole period when it already is (the metastore could
// not answer: the cache served the token stale).
func (w *credWatch) due(at, now time.Time) time.Duration {
	if d := at.Add(TokenCacheTTL).Sub(now); d > 0 {
		return d
	}
	return TokenCacheTTL
}

// run checks the token again and ends the session, or schedules the
// next check.
func (w *credWatch) run() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	// Bounded by tokenReadTimeout (one metastore read, shared).
	_, result, at, err := w.s.tokens.verify(context.Background(), w.token, "")
	now := w.s.tokens.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	switch {
	case err == nil && result != authStale:
		w.verified = at
	case err == nil:
	case err.Status == http.StatusServiceUnavailable && now.Sub(w.verified) < TokenStaleIfError:
		// The metastore cannot answer and the cache lost the entry: this
		// watch verified the token lately, which is the outage rule.
	default:
		w.end(err)
		return
	}
	w.check = time.AfterFunc(w.due(at, now), w.run)
}

// stop ends the watch (the session ended).
func (w *credWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.check != nil {
		w.check.Stop()
	}
	if w.expiry != nil {
		w.expiry.Stop()
	}
}
