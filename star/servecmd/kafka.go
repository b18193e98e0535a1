package servecmd

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/pflag"

	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/kafka"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// DefaultDevKafkaListen is where `star dev` serves the Kafka protocol
// when the port is free (Kafka's own default port, on loopback).
const DefaultDevKafkaListen = "127.0.0.1:9092"

// kafkaFace is the Kafka listener of a run (star/kafka; docs/kafka.md).
type kafkaFace struct {
	listen string // "" : not served
	basin  string
	// advertise is the host:port Metadata names as the one broker (a
	// cluster behind a load balancer: the balancer's); "": the address
	// each client reached.
	advertise string
	// optional: the listen address is dev's default, not asked for, so a
	// busy port serves without Kafka (a warning) instead of failing.
	optional bool
	addr     net.Addr // once listening (the dev banner)
}

func (f *kafkaFace) register(fs *pflag.FlagSet, defListen string) {
	what := "address to serve the Kafka protocol on (topics as streams of --kafka-basin; docs/kafka.md)"
	if defListen == "" {
		what += "; empty: not served"
	} else {
		what += "; served there by default when the port is free, empty: not served"
	}
	fs.StringVar(&f.listen, "kafka-listen", defListen, what)
	fs.StringVar(&f.basin, "kafka-basin", kafka.DefaultBasin, "basin holding the Kafka topics' streams (topic T's partition p is stream T/p; created on first use)")
	fs.StringVar(&f.advertise, "kafka-advertise", "", "host:port Kafka clients are told to connect to, the one broker leading every partition (behind a load balancer: its name and Kafka port; empty: the address each client reached); any star serves any partition, forwarding to its leader")
}

// listenOn opens the Kafka listener: nil when not served, or when the
// port of an optional address is taken.
func (f *kafkaFace) listenOn(log *slog.Logger) (net.Listener, error) {
	if f == nil || f.listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		if f.optional {
			log.Warn("not serving Kafka: its default address is taken (set --kafka-listen)", "address", f.listen, "err", err)
			return nil, nil
		}
		return nil, fmt.Errorf("listen on %s (--kafka-listen): %w", f.listen, err)
	}
	f.addr = ln.Addr()
	return ln, nil
}

// start serves Kafka on ln (over TLS when the star has a certificate),
// authenticating tokens as the S2 API does, and reading and appending
// partitions other stars lead at those stars, as the S2 face forwards
// (with the internal credential and the peers' TLS of so).
func (f *kafkaFace) start(n *node.Node, srv *server.Server, ln net.Listener, so server.Options, tc *tls.Config, log *slog.Logger) (*kafka.Server, error) {
	fwd := &kafka.Forward{StarID: n.StarID(), TLS: so.PeerTLS}
	if !so.Auth.Open {
		cred, err := auth.InternalCredential(so.Auth.InternalKey)
		if err != nil {
			return nil, err
		}
		fwd.Credential = cred
	}
	ks, err := kafka.New(kafka.Config{Star: n, Basin: f.basin, Open: so.Auth.Open, Authenticate: srv.Authenticate,
		Advertise: f.advertise, Forward: fwd, Logger: log, Tracer: so.Tracer})
	if err != nil {
		return nil, err
	}
	srv.ServeKafka(ks.PeerHandler()) // peers' group requests for the groups this star coordinates
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	go func() {
		if err := ks.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Error("the Kafka listener stopped", "err", err)
		}
	}()
	log.Info("serving Kafka", "listen", ln.Addr().String(), "basin", ks.Basin())
	return ks, nil
}

// banner is the dev banner's Kafka line ("" when not served).
func (f *kafkaFace) banner(open bool) string {
	if f.addr == nil {
		return ""
	}
	how := "SASL/PLAIN with the token as password"
	if open {
		how = "no authentication"
	}
	return fmt.Sprintf("%s (bootstrap server; topics in basin %s; %s; docs/kafka.md)", f.addr, f.basin, how)
}
