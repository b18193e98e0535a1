package server

import (
	"context"

	"github.com/starlog/starlog/star/auth"
)

// Authenticate checks an access token for a face of the star that is not
// HTTP (the Kafka listener's SASL/PLAIN password): the admin on an open
// star, else the token's principal or the error an S2 request bearing it
// would get (*api.Error: 401, or a retryable 429 or 503). addr is the
// client's address: unknown tokens are bounded per client as on S2's
// routes (TokenLookupsPerSec). The decision is counted in
// starlog_auth_decisions_total like every other.
func (s *Server) Authenticate(ctx context.Context, token, addr string) (auth.Principal, error) {
	if s.keys.IsOpen() {
		s.authDecisions.WithLabelValues(authOpen).Inc()
		return auth.AdminPrincipal(), nil
	}
	p, result, err := s.tokens.authenticate(ctx, token, "ip:"+clientIP(addr))
	s.authDecisions.WithLabelValues(result).Inc()
	if err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}
