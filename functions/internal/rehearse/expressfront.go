package rehearse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// ExpressFront is the endpoint the rehearsal gives the star and the
// functions for S3 (STARLOG_S3_ENDPOINT): it answers S3 Express
// CreateSession (GET /<bucket>?session) for directory buckets with session
// credentials, and passes every other request to versitygw, re-signed with
// the gateway's own keys (the SDK signs directory-bucket requests for the
// s3express service with the session credentials, which versitygw does not
// take). It checks no signature itself.
//
// TODO(h-express): this is the rehearsal's fallback until the S3 Express
// front being written on branch h-express in shared/testsvc lands; replace
// StartExpressFront with that front (which also checks session tokens and
// modes) and drop this file.
type ExpressFront struct {
	URL string
	// Sessions counts CreateSession calls per bucket; Requests counts the
	// requests passed on per bucket.
	sessions, requests sync.Map // bucket → *atomic.Int64

	upstream             string
	region, access, secr string
	signer               *v4.Signer
	client               *http.Client
}

// StartExpressFront serves on a loopback port in front of the S3 endpoint
// upstream (path-style, the given region and keys) until the test ends.
func StartExpressFront(tb testing.TB, upstream, region, accessKey, secretKey string) *ExpressFront {
	tb.Helper()
	f := &ExpressFront{
		upstream: strings.TrimSuffix(upstream, "/"), region: region, access: accessKey, secr: secretKey,
		signer: v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	f.URL = "http://" + ln.Addr().String()
	return f
}

func count(m *sync.Map, k string) *atomic.Int64 {
	v, _ := m.LoadOrStore(k, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// Sessions is how many sessions were created for bucket.
func (f *ExpressFront) Sessions(bucket string) int64 { return count(&f.sessions, bucket).Load() }

// Requests is how many requests for bucket were passed on.
func (f *ExpressFront) Requests(bucket string) int64 { return count(&f.requests, bucket).Load() }

// IsDirectoryBucket says whether a bucket name is an S3 Express directory
// bucket's (<base>--<zone id>--x-s3).
func IsDirectoryBucket(name string) bool { return strings.HasSuffix(name, "--x-s3") }

func (f *ExpressFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if _, ok := r.URL.Query()["session"]; ok && r.Method == http.MethodGet && !strings.Contains(strings.TrimPrefix(r.URL.Path, "/"), "/") {
		if !IsDirectoryBucket(bucket) {
			http.Error(w, "CreateSession on a general purpose bucket", http.StatusBadRequest)
			return
		}
		count(&f.sessions, bucket).Add(1)
		tok := make([]byte, 16)
		rand.Read(tok)
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<CreateSessionResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Credentials><SessionToken>%s</SessionToken><SecretAccessKey>%s</SecretAccessKey><AccessKeyId>ASIAREHEARSAL</AccessKeyId><Expiration>%s</Expiration></Credentials></CreateSessionResult>`,
			hex.EncodeToString(tok), hex.EncodeToString(tok[:8]), time.Now().Add(5*time.Minute).UTC().Format(time.RFC3339))
		return
	}
	count(&f.requests, bucket).Add(1)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, f.upstream+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.ContentLength = r.ContentLength
	if r.ContentLength == 0 {
		out.Body = http.NoBody
	}
	for k, vs := range r.Header {
		switch strings.ToLower(k) {
		case "authorization", "x-amz-date", "x-amz-security-token", "x-amz-s3session-token", "expect", "content-length", "connection":
			continue
		}
		out.Header[k] = vs
	}
	hash := r.Header.Get("X-Amz-Content-Sha256")
	if hash == "" {
		hash = "UNSIGNED-PAYLOAD"
		out.Header.Set("X-Amz-Content-Sha256", hash)
	}
	creds := aws.Credentials{AccessKeyID: f.access, SecretAccessKey: f.secr}
	if err := f.signer.SignHTTP(context.Background(), creds, out, hash, "s3", f.region, time.Now()); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	res, err := f.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	io.Copy(w, res.Body)
}
