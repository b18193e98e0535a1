package testsvc

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/starlog/starlog/shared/testsvc/expressfront"
)

// ExpressServer is the S3 Express stand-in (package expressfront) on
// 127.0.0.1, in front of a versitygw. Directory bucket names
// ("<base>--<zone id>--x-s3") are versitygw buckets of the same name
// (versitygw v1.8.0 takes them as they are).
type ExpressServer struct {
	// Endpoint is the front as a host name, http://s3express.test:<port>,
	// for virtual-hosted requests ("<bucket>.s3express.test"), which is how
	// the SDK addresses directory buckets on AWS. Only HTTPClient resolves
	// those names (to the front).
	Endpoint string
	// PathEndpoint is http://127.0.0.1:<port>, for path-style clients.
	PathEndpoint string
	Region       string
	// AccessKey/SecretKey may open ReadWrite sessions (the star's role).
	AccessKey, SecretKey string
	// ReadOnlyAccessKey/ReadOnlySecretKey may open ReadOnly sessions only
	// (the settle role).
	ReadOnlyAccessKey, ReadOnlySecretKey string
	// HTTPClient dials the front for every host name. It is the SDK's
	// buildable client, so the SDK can still add a CA bundle
	// (AWS_CA_BUNDLE) or its defaults to it.
	HTTPClient *awshttp.BuildableClient
	Front      *expressfront.Front
	Versity    VersityServer
}

// ExpressDomain is the endpoint host name of StartExpress.
const ExpressDomain = "s3express.test"

// DirectoryBucket names a directory bucket: base--zone--x-s3.
func DirectoryBucket(base, zone string) string { return base + "--" + zone + "--x-s3" }

// StartExpress serves an expressfront in front of v on a loopback port
// until the test ends. tune may change the front's config (a short
// SessionLifetime, more principals).
func StartExpress(tb testing.TB, v VersityServer, tune ...func(*expressfront.Config)) ExpressServer {
	tb.Helper()
	e := ExpressServer{
		Region:            v.Region,
		AccessKey:         "expressreadwrite",
		SecretKey:         "expressreadwritesecret",
		ReadOnlyAccessKey: "expressreadonly",
		ReadOnlySecretKey: "expressreadonlysecret",
		Versity:           v,
	}
	cfg := expressfront.Config{
		Region:            v.Region,
		Upstream:          v.Endpoint,
		UpstreamAccessKey: v.AccessKey,
		UpstreamSecretKey: v.SecretKey,
		Domain:            ExpressDomain,
		Principals: []expressfront.Principal{
			{AccessKey: e.AccessKey, SecretKey: e.SecretKey},
			{AccessKey: e.ReadOnlyAccessKey, SecretKey: e.ReadOnlySecretKey, ReadOnly: true},
		},
	}
	for _, t := range tune {
		t(&cfg)
	}
	front, err := expressfront.New(cfg)
	if err != nil {
		tb.Fatalf("testsvc: express front: %v", err)
	}
	e.Front = front
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testsvc: express front: listen: %v", err)
	}
	addr := l.Addr().String()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{Handler: front, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	tb.Cleanup(func() {
		// The test is over: a short graceful stop, then close. (Shutdown
		// waits 5 s for a connection that was opened but never used, which
		// the SDK's pool leaves behind now and then.)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			tb.Errorf("testsvc: express front: %v", err)
		}
		front.CloseIdleConnections() // versitygw stops at once without them
	})
	e.Endpoint = "http://" + ExpressDomain + ":" + port
	e.PathEndpoint = "http://" + addr
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	e.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.Proxy = nil
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		}
	})
	return e
}
