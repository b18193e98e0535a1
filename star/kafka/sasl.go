package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
)

// recheckEvery is how often a connection's token is checked again: the
// token store's cache bound (star/server's TokenCacheTTL), so a revoked
// token stops a Kafka connection as soon as it stops an S2 request.
const recheckEvery = 2 * time.Second

// mechanismPlain is the one SASL mechanism served.
const mechanismPlain = "PLAIN"

func (cs *conn) saslHandshake(r *kmsg.SASLHandshakeRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = []string{mechanismPlain}
	if r.Mechanism != mechanismPlain {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp
	}
	cs.mechanism = mechanismPlain
	// v0: the next frame is PLAIN's message itself, not a Kafka request.
	cs.rawSASL = r.Version == 0
	return resp
}

// saslAuthenticate takes PLAIN's message in a SaslAuthenticate request
// (after a v1 handshake). A failure is answered, then the connection
// closed (as Kafka does). A connection may authenticate again (KIP-368),
// with a new handshake first.
func (cs *conn) saslAuthenticate(ctx context.Context, r *kmsg.SASLAuthenticateRequest) (kmsg.Response, error) {
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if cs.mechanism == "" || cs.rawSASL {
		return nil, fmt.Errorf("%w: SaslAuthenticate without a SaslHandshake v1 before it", errClose)
	}
	cs.mechanism = "" // each authentication takes its own handshake
	p, err := cs.plain(ctx, r.SASLAuthBytes)
	if errors.Is(err, errClose) {
		return nil, err
	}
	if err != nil {
		// The connection is closed after this answer, and anything it
		// sends meanwhile is refused (principal is nil again).
		msg := errMessage(err)
		resp.ErrorCode, resp.ErrorMessage = kerr.SaslAuthenticationFailed.Code, &msg
		cs.closeAfter = true
		return resp, nil
	}
	if p.ExpiresAt != nil {
		// The client authenticates again before then (KIP-368).
		resp.SessionLifetimeMillis = max(time.Until(*p.ExpiresAt).Milliseconds(), 1)
	}
	return resp, nil
}

// rawAuthenticate takes the frame after a SaslHandshake v0: PLAIN's
// message with no Kafka header, answered with an empty frame on success;
// a failure closes the connection (the v0 exchange has no error answer).
func (cs *conn) rawAuthenticate(frame []byte) error {
	cs.rawSASL, cs.mechanism = false, ""
	ctx, cancel := context.WithTimeout(cs.s.ctx, RequestTimeout)
	defer cancel()
	if _, err := cs.plain(ctx, frame); err != nil {
		return fmt.Errorf("%w: SASL/PLAIN (handshake v0): %v", errClose, errMessage(err))
	}
	return nil
}

// plain checks a SASL/PLAIN message (authzid NUL authcid NUL password):
// the password is an access token, checked as the S2 API checks a bearer
// token; the user names are not used. On success the connection acts
// for the token's principal; on failure it acts for no one. A malformed
// message is errClose.
func (cs *conn) plain(ctx context.Context, msg []byte) (auth.Principal, error) {
	parts := bytes.SplitN(msg, []byte{0}, 3)
	if len(parts) != 3 {
		cs.principal = nil
		return auth.Principal{}, fmt.Errorf("%w: malformed SASL/PLAIN message", errClose)
	}
	token := string(parts[2])
	if cs.s.cfg.Open {
		p := auth.AdminPrincipal()
		cs.principal = &p
		return p, nil
	}
	p, err := cs.s.cfg.Authenticate(ctx, token, cs.client)
	if err == nil && p.AutoPrefixStreams {
		err = auth.Denied("access token %q prefixes stream names (auto_prefix_streams); the Kafka face names topics as they are stored, so it refuses such tokens", p.ID)
	}
	if err != nil {
		cs.principal = nil
		return auth.Principal{}, err
	}
	cs.principal, cs.token, cs.checked = &p, token, time.Now()
	return p, nil
}

// recheck checks the connection's token again once recheckEvery has
// passed; a token that no longer stands (revoked, expired) closes the
// connection before the request has any effect. A check the token store
// cannot make now (503) keeps the connection, as the S2 face keeps
// serving a token it verified while the metastore is out.
func (cs *conn) recheck() error {
	if cs.s.cfg.Open || cs.token == "" || time.Since(cs.checked) < recheckEvery {
		return nil
	}
	ctx, cancel := context.WithTimeout(cs.s.ctx, RequestTimeout)
	defer cancel()
	p, err := cs.s.cfg.Authenticate(ctx, cs.token, cs.client)
	var ae *api.Error
	if err != nil && errors.As(err, &ae) && ae.Status != 401 {
		return nil
	}
	if err != nil {
		cs.principal = nil
		return fmt.Errorf("%w: access token no longer valid: %v", errClose, errMessage(err))
	}
	cs.principal, cs.checked = &p, time.Now()
	return nil
}

// errMessage is the message of an error for a client: an *api.Error's
// own message, else the error's text.
func errMessage(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Message
	}
	return err.Error()
}
