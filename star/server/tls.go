package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
)

// A star can serve TLS itself (star serve --tls-cert/--tls-key), so
// load-balancer→star and star→star traffic can be encrypted: HTTP/1.1 and
// HTTP/2 negotiated by ALPN on the same port, and no cleartext listener.
// Cleartext HTTP/2 (h2c) stays for stars without TLS: local use, and
// behind a load balancer that terminates TLS and passes the h2 bytes on.

// LoadServerTLS loads a PEM certificate chain and its key for serving.
func LoadServerTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server: TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// LoadPeerTLS is the client configuration a star dials its peers with
// (forwarding, the settle nudge): it trusts the PEM certificates in caFile,
// or the system's roots when caFile is empty.
func LoadPeerTLS(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("server: TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("server: TLS CA " + caFile + ": no PEM certificate in it")
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// HTTPSServer is HTTPServer serving TLS with cfg: HTTP/1.1 and HTTP/2 by
// ALPN, no cleartext HTTP/2. Serve it with ServeTLS(ln, "", "").
func (s *Server) HTTPSServer(addr string, cfg *tls.Config) *http.Server {
	hs := s.HTTPServer(addr)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	hs.Protocols = &p
	hs.TLSConfig = cfg.Clone()
	return hs
}
