package kafka_test

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/kafka"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

const (
	testAdmin = "admin-token-for-kafka-tests-0123456789"
	testKey   = "internal-key-for-kafka-tests-0123456789abcdef"
)

func testLog() *slog.Logger {
	if os.Getenv("STARLOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// star is a real node (SQLite, in-memory buckets) with the S2 API on one
// loopback port and the Kafka listener on another, as `star serve` runs
// them.
type star struct {
	t     testing.TB
	n     *node.Node
	srv   *server.Server
	k     *kafka.Server
	base  string // the S2 API's http://host:port
	kafka string // the Kafka listener's host:port
	open  bool
}

// startStar starts a star; open turns authentication off (star dev
// --open), else the admin token is testAdmin.
func startStar(t testing.TB, open bool) *star {
	t.Helper()
	return startStarOn(t, open, testsvc.SQLite(t))
}

// startStarOn is startStar on the metastore ms, with the Kafka config
// changed by opts.
func startStarOn(t testing.TB, open bool, ms meta.Store, opts ...func(*kafka.Config)) *star {
	t.Helper()
	return startStarNode(t, open, ms, nil, opts...)
}

// startStarNode is startStarOn with the node's config and dependencies
// changed by nodeOpt too (nil: unchanged).
func startStarNode(t testing.TB, open bool, ms meta.Store, nodeOpt func(*node.Config, *node.Deps), opts ...func(*kafka.Config)) *star {
	t.Helper()
	return startStarWith(t, starOpts{open: open, meta: ms, node: nodeOpt, kafka: opts})
}

// starOpts is how startStarWith starts a star.
type starOpts struct {
	open bool
	meta meta.Store
	objs objstore.Store                 // nil: the star's own in-memory buckets
	id   string                         // its star id ("kafka-star")
	node func(*node.Config, *node.Deps) // nil: unchanged
	// cluster: a star among others on the same stores (heartbeats fast,
	// the Kafka face forwarding to the leaders of partitions).
	cluster bool
	server  func(*server.Options) // nil: unchanged
	// peer wraps the handler of forwarded group requests (nil: as is).
	peer  func(http.Handler) http.Handler
	kafka []func(*kafka.Config)
}

func startStarWith(t testing.TB, o starOpts) *star {
	t.Helper()
	objs := o.objs
	if objs == nil {
		var err error
		if objs, err = mem.New("standard", "express-a", "express-b", "express-c"); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Defaults()
	cfg.StarID, cfg.Address = cmp.Or(o.id, "kafka-star"), ln.Addr().String()
	if o.cluster {
		cfg.HeartbeatEvery, cfg.DeadAfter = 50*time.Millisecond, time.Second
	}
	cfg.Standard.FlushInterval, cfg.Express.FlushInterval = time.Millisecond, time.Millisecond
	cfg.DeletionPending = 300 * time.Millisecond
	deps := node.Deps{Meta: o.meta, Objects: objs, Logger: testLog()}
	if o.node != nil {
		o.node(&cfg, &deps)
	}
	n, err := node.Open(context.Background(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	authCfg := auth.Open()
	if !o.open {
		authCfg = auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}
	}
	so := server.Options{Auth: authCfg}
	if o.cluster {
		so.HeartbeatMin, so.HeartbeatMax = 50*time.Millisecond, 100*time.Millisecond
	}
	if o.server != nil {
		o.server(&so)
	}
	srv, err := server.New(n, so)
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer(ln.Addr().String())
	go hs.Serve(srv.Listener(ln))
	kc := kafka.Config{Star: n, Open: o.open, Authenticate: srv.Authenticate}
	if o.cluster {
		kc.Forward = &kafka.Forward{StarID: cfg.StarID}
		if !o.open {
			if kc.Forward.Credential, err = auth.InternalCredential([]byte(testKey)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, f := range o.kafka {
		f(&kc)
	}
	k, err := kafka.New(kc)
	if err != nil {
		t.Fatal(err)
	}
	kln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go k.Serve(kln)
	ph := k.PeerHandler()
	if o.peer != nil {
		ph = o.peer(ph)
	}
	srv.ServeKafka(ph)
	s := &star{t: t, n: n, srv: srv, k: k, base: "http://" + ln.Addr().String(), kafka: kln.Addr().String(), open: o.open}
	t.Cleanup(func() {
		k.Close()
		srv.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		n.Close(ctx)
	})
	return s
}

// client is a kgo client of the star: SASL/PLAIN with token unless it
// is "", plus opts.
func (s *star) client(token string, opts ...kgo.Opt) *kgo.Client {
	s.t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(s.kafka), kgo.RetryTimeout(5 * time.Second),
		kgo.RequestTimeoutOverhead(5 * time.Second), kgo.MetadataMinAge(10 * time.Millisecond)}
	if token != "" {
		base = append(base, kgo.SASL(plain.Auth{User: "test", Pass: token}.AsMechanism()))
	}
	c, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(c.Close)
	return c
}

// admin is a client with the admin token (or none on an open star).
func (s *star) admin(opts ...kgo.Opt) *kgo.Client {
	if s.open {
		return s.client("", opts...)
	}
	return s.client(testAdmin, opts...)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// createTopic creates topic with n partitions and fails the test on an
// error code.
func createTopic(t testing.TB, c *kgo.Client, topic string, n int32, configs ...kmsg.CreateTopicsRequestTopicConfig) kmsg.CreateTopicsResponseTopic {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor, rt.Configs = topic, n, -1, configs
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatalf("CreateTopics %s: %v", topic, err)
	}
	got := resp.Topics[0]
	if got.ErrorCode != 0 {
		t.Fatalf("CreateTopics %s: error code %d (%v)", topic, got.ErrorCode, deref(got.ErrorMessage))
	}
	return got
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

var _ = http.MethodGet
