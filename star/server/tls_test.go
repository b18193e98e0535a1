package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// tlsClients are an HTTP/1.1 and an HTTP/2 client over TLS trusting pool.
func tlsClients(pool *x509.CertPool) (h1, h2 *http.Client) {
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetHTTP2(true)
	cfg := &tls.Config{RootCAs: pool}
	h1 = &http.Client{Transport: &http.Transport{Protocols: &p1, TLSClientConfig: cfg, DisableCompression: true}, Timeout: 30 * time.Second}
	h2 = &http.Client{Transport: &http.Transport{Protocols: &p2, TLSClientConfig: cfg.Clone(), DisableCompression: true}}
	return h1, h2
}

// tlsStar is starWith serving TLS with ca's leaf, advertising https, and
// dialling peers trusting peerCAFile.
func tlsStar(t *testing.T, id string, ms meta.Store, objs objstore.Store, ca testsvc.CA, peerCAFile string) *env {
	t.Helper()
	serveCfg, err := server.LoadServerTLS(ca.CertFile, ca.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := server.LoadPeerTLS(peerCAFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Defaults()
	cfg.StarID, cfg.Address, cfg.PeerTLS = id, "https://"+ln.Addr().String(), peer
	cfg.Standard.FlushInterval = time.Millisecond
	cfg.Express.FlushInterval = time.Millisecond
	cfg.HeartbeatEvery, cfg.DeadAfter = 50*time.Millisecond, time.Second
	n, err := node.Open(context.Background(), cfg, node.Deps{Meta: ms, Objects: objs, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(n, server.Options{HeartbeatMin: 50 * time.Millisecond, HeartbeatMax: 100 * time.Millisecond, PeerTLS: peer, Auth: auth.Open()})
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPSServer(ln.Addr().String(), serveCfg)
	go hs.ServeTLS(ln, "", "")
	e := &env{t: t, n: n, srv: srv, hs: hs, base: "https://" + ln.Addr().String()}
	e.h1, e.h2 = tlsClients(ca.Pool)
	t.Cleanup(func() {
		srv.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		n.Close(ctx)
		e.h1.CloseIdleConnections()
		e.h2.CloseIdleConnections()
	})
	return e
}

// A star serving TLS: HTTP/1.1 and HTTP/2 (ALPN) clients that trust its
// CA are served, an S2S append session runs over h2+TLS, and neither a
// client that does not trust the certificate nor a cleartext one is.
func TestTLSServe(t *testing.T) {
	t.Parallel()
	ca := testsvc.NewCA(t, "star")
	e := tlsStar(t, "tls-star", testsvc.SQLite(t), memObjects(t), ca, ca.CAFile)
	e.setupBasin("tls-basin")

	r, err := e.h1.Get(e.base + "/health")
	if err != nil || r.StatusCode != 200 || r.ProtoMajor != 1 || r.TLS == nil {
		t.Fatalf("h1 over TLS: %v %+v", err, r)
	}
	r.Body.Close()
	want(t, e.appendJSON("tls-basin", "s", textRecords("h1", 2)), 200, "")

	// S2S append session over h2+TLS.
	s := e.openAppendSession("tls-basin", "s", api.CompressionNone)
	if s.res.ProtoMajor != 2 || s.res.TLS == nil || s.res.TLS.NegotiatedProtocol != "h2" {
		t.Fatalf("append session: proto %s, TLS %v", s.res.Proto, s.res.TLS)
	}
	next := uint64(2)
	for i := range 3 {
		s.send(t, batch_(i))
		a, terr := s.ack(t)
		if terr != nil || a.Start.SeqNum != next {
			t.Fatalf("session ack %+v %v, want start %d", a, terr, next)
		}
		next = a.End.SeqNum
	}
	s.pw.Close()
	if tail := e.tail("tls-basin", "s"); tail.SeqNum != next {
		t.Fatalf("tail %d, want %d", tail.SeqNum, next)
	}

	// A client that trusts another CA, or none, is refused the handshake.
	other := testsvc.NewCA(t, "other")
	for name, pool := range map[string]*x509.CertPool{"other CA": other.Pool, "system roots": nil} {
		h1, _ := tlsClients(pool) // nil: the system's roots
		_, err := h1.Get(e.base + "/health")
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("%s: GET over TLS: %v, want a certificate error", name, err)
		}
	}
	// No cleartext: HTTP/1.1 and h2c to the TLS port get no API answer.
	var pc http.Protocols
	pc.SetUnencryptedHTTP2(true)
	for name, c := range map[string]*http.Client{
		"http/1.1": {Timeout: 5 * time.Second},
		"h2c":      {Transport: &http.Transport{Protocols: &pc}, Timeout: 5 * time.Second},
	} {
		res, err := c.Get(strings.Replace(e.base, "https://", "http://", 1) + "/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				t.Errorf("%s to the TLS port: %s, want no API answer", name, res.Status)
			}
		}
	}
}

// Forwarding between two stars serving TLS: a request to the star that
// does not lead goes to the leader over https (h2 by ALPN), an S2S append
// session included; a star that does not trust the leader's certificate
// cannot forward.
func TestTLSForward(t *testing.T) {
	t.Parallel()
	ca := testsvc.NewCA(t, "cluster")
	ms, objs := testsvc.SQLite(t), memObjects(t)
	a := tlsStar(t, "a", ms, objs, ca, ca.CAFile)
	b := tlsStar(t, "b", ms, objs, ca, ca.CAFile)
	a.setupBasin("tls-forward")
	want(t, a.appendJSON("tls-forward", "s", textRecords("a", 3)), 200, "")

	r := b.appendJSON("tls-forward", "s", textRecords("b", 2))
	want(t, r, 200, "")
	if ack, err := api.DecodeAppendAckJSON(r.body); err != nil || ack.Start.SeqNum != 3 || ack.End.SeqNum != 5 {
		t.Fatalf("forwarded append ack %+v %v", ack, err)
	}
	batch, rr := b.readJSON("tls-forward", "s", "seq_num=0")
	want(t, rr, 200, "")
	if len(batch.Records) != 5 {
		t.Fatalf("forwarded read: %d records", len(batch.Records))
	}
	s := b.openAppendSession("tls-forward", "s", api.CompressionNone)
	s.send(t, batch_(0))
	if ack, terr := s.ack(t); terr != nil || ack.Start.SeqNum != 5 {
		t.Fatalf("forwarded session ack %+v %v", ack, terr)
	}
	s.pw.Close()

	// A third star trusting another CA cannot reach the leader.
	other := testsvc.NewCA(t, "other")
	c := tlsStar(t, "c", ms, objs, other, other.CAFile)
	bad := c.appendJSON("tls-forward", "s", textRecords("c", 1))
	if bad.status == 200 {
		t.Fatalf("a star that does not trust the leader's certificate forwarded: %s", bad)
	}
	if tail := a.tail("tls-forward", "s"); tail.SeqNum != 7 {
		t.Fatalf("tail %d after the refused forward, want 7", tail.SeqNum)
	}
}
