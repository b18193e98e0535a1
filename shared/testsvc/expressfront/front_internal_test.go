package expressfront

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	region  = "us-east-1"
	bucket  = "b1--use1-az4--x-s3"
	other   = "b2--use1-az5--x-s3"
	upAK    = "upstreamkey"
	upSK    = "upstreamsecret"
	rwAK    = "rwkey"
	rwSK    = "rwsecret"
	roAK    = "rokey"
	roSK    = "rosecret"
	general = "plain-bucket"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// upstream is a fake S3 server that checks the front's re-signed requests
// with the upstream keys and records them.
type upstream struct {
	t    *testing.T
	clk  *clock
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	method, path, query string
	header              http.Header
	body                []byte
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a, err := parseAuth(r)
	if err != nil || a.AccessKey != upAK || a.Service != "s3" {
		u.t.Errorf("upstream: bad auth %+v %v", a, err)
		w.WriteHeader(http.StatusForbidden)
		return
	}
	body, _ := io.ReadAll(r.Body)
	at, _ := time.Parse(amzDateFormat, r.Header.Get(headerDate))
	if verr := verify(r.Context(), r, requestPath(r), a, upSK, r.Header.Get(headerContentHash), at); verr != nil {
		u.t.Errorf("upstream: %s %s: re-signed request does not verify: %v", r.Method, r.URL, verr)
		w.WriteHeader(http.StatusForbidden)
		return
	}
	u.mu.Lock()
	u.seen = append(u.seen, seenRequest{r.Method, requestPath(r), r.URL.RawQuery, r.Header.Clone(), body})
	u.mu.Unlock()
	switch {
	case r.Method == http.MethodHead && (r.URL.Path == "/"+bucket || r.URL.Path == "/"+other):
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodHead && !strings.Contains(strings.TrimPrefix(r.URL.Path, "/"), "/"):
		w.WriteHeader(http.StatusNotFound)
	case r.URL.Query().Get("list-type") == "2":
		var b strings.Builder
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>` + bucket + `</Name>`)
		for i := range 20 {
			fmt.Fprintf(&b, "<Contents><Key>k/%02d</Key><Size>%d</Size></Contents>\n", i, i)
		}
		b.WriteString(`<IsTruncated>false</IsTruncated></ListBucketResult>`)
		w.Header().Set("Content-Type", "application/xml")
		_, _ = io.WriteString(w, b.String())
	default:
		w.Header().Set("ETag", `"etag"`)
		w.WriteHeader(http.StatusOK)
	}
}

func (u *upstream) last() seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return seenRequest{}
	}
	return u.seen[len(u.seen)-1]
}

type fixture struct {
	t    *testing.T
	clk  *clock
	up   *upstream
	f    *Front
	srv  *httptest.Server
	host string
}

func newFixture(t *testing.T) *fixture {
	clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	up := &upstream{t: t, clk: clk}
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	f, err := New(Config{
		Region: region, Upstream: us.URL, UpstreamAccessKey: upAK, UpstreamSecretKey: upSK,
		Principals:      []Principal{{AccessKey: rwAK, SecretKey: rwSK}, {AccessKey: roAK, SecretKey: roSK, ReadOnly: true}},
		SessionLifetime: 10 * time.Second, ExpiryGrace: time.Second, Now: clk.Now, Seed: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(f.CloseIdleConnections)
	return &fixture{t: t, clk: clk, up: up, f: f, srv: srv, host: strings.TrimPrefix(srv.URL, "http://")}
}

// req is one request to sign and send.
type req struct {
	method, path, query string
	header              map[string]string
	body                string
	creds               aws.Credentials // SessionToken set: signed as a session request
	service             string          // default s3express
	signAt              time.Time       // default the clock's now
	tamperBody          bool            // send a different body than signed
	tamperSig           bool
}

// do signs like the SDK (a session token goes in x-amz-s3session-token,
// signed) and returns the status and the S3 error code, if any.
func (x *fixture) do(r req) (int, string, []byte) {
	x.t.Helper()
	url := x.srv.URL + r.path
	if r.query != "" {
		url += "?" + r.query
	}
	hr, err := http.NewRequest(r.method, url, strings.NewReader(r.body))
	if err != nil {
		x.t.Fatal(err)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	hash := sha256Hex([]byte(r.body))
	hr.Header.Set(headerContentHash, hash)
	creds := r.creds
	if creds.SessionToken != "" {
		hr.Header.Set(headerSession, creds.SessionToken)
	}
	service := r.service
	if service == "" {
		service = "s3express"
	}
	at := r.signAt
	if at.IsZero() {
		at = x.clk.Now()
	}
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey},
		hr, hash, service, region, at, func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true; o.DisableSessionToken = true })
	if err != nil {
		x.t.Fatal(err)
	}
	if r.tamperSig {
		hr.Header.Set("Authorization", hr.Header.Get("Authorization")[:len(hr.Header.Get("Authorization"))-4]+"0000")
	}
	if r.tamperBody {
		hr.Body = io.NopCloser(strings.NewReader(strings.ToUpper(r.body)))
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		x.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e errorBody
	if resp.StatusCode >= 300 && len(body) > 0 {
		_ = xml.Unmarshal(body, &e)
	}
	return resp.StatusCode, e.Code, body
}

var (
	rw = aws.Credentials{AccessKeyID: rwAK, SecretAccessKey: rwSK}
	ro = aws.Credentials{AccessKeyID: roAK, SecretAccessKey: roSK}
)

// session opens a session through CreateSession, as the SDK does.
func (x *fixture) session(p aws.Credentials, b string, mode Mode) aws.Credentials {
	x.t.Helper()
	h := map[string]string{}
	if mode != "" {
		h[headerMode] = string(mode)
	}
	status, code, body := x.do(req{method: http.MethodGet, path: "/" + b + "/", query: "session", header: h, creds: p})
	if status != http.StatusOK {
		x.t.Fatalf("CreateSession(%s, %q): %d %s", b, mode, status, code)
	}
	var out createSessionResult
	if err := xml.Unmarshal(body, &out); err != nil {
		x.t.Fatal(err)
	}
	exp, err := time.Parse(time.RFC3339, out.Credentials.Expiration)
	if err != nil {
		x.t.Fatal(err)
	}
	return aws.Credentials{AccessKeyID: out.Credentials.AccessKeyID, SecretAccessKey: out.Credentials.SecretAccessKey,
		SessionToken: out.Credentials.SessionToken, CanExpire: true, Expires: exp}
}

func TestCreateSession(t *testing.T) {
	x := newFixture(t)
	cs := func(p aws.Credentials, b string, mode Mode, mut func(*req)) (int, string) {
		r := req{method: http.MethodGet, path: "/" + b + "/", query: "session", header: map[string]string{}, creds: p}
		if mode != "" {
			r.header[headerMode] = string(mode)
		}
		if mut != nil {
			mut(&r)
		}
		s, c, _ := x.do(r)
		return s, c
	}
	cases := []struct {
		name   string
		p      aws.Credentials
		bucket string
		mode   Mode
		mut    func(*req)
		status int
		code   string
	}{
		{"read-write principal, no mode", rw, bucket, "", nil, 200, ""},
		{"read-write principal, ReadOnly", rw, bucket, ReadOnly, nil, 200, ""},
		{"read-only principal, no mode falls back", ro, bucket, "", nil, 200, ""},
		{"read-only principal asks ReadWrite", ro, bucket, ReadWrite, nil, 403, "AccessDenied"},
		{"bad mode", rw, bucket, "Sometimes", nil, 400, "InvalidArgument"},
		{"missing bucket", rw, "nope--use1-az4--x-s3", "", nil, 404, "NoSuchBucket"},
		{"unknown key", aws.Credentials{AccessKeyID: "who", SecretAccessKey: "x"}, bucket, "", nil, 403, "InvalidAccessKeyId"},
		{"wrong secret", aws.Credentials{AccessKeyID: rwAK, SecretAccessKey: "x"}, bucket, "", nil, 403, "SignatureDoesNotMatch"},
		{"tampered signature", rw, bucket, "", func(r *req) { r.tamperSig = true }, 403, "SignatureDoesNotMatch"},
		{"service s3", rw, bucket, "", func(r *req) { r.service = "s3" }, 400, "AuthorizationHeaderMalformed"},
		{"skewed", rw, bucket, "", func(r *req) { r.signAt = x.clk.Now().Add(-20 * time.Minute) }, 403, "RequestTimeTooSkewed"},
		{"with a session token", rw, bucket, "", func(r *req) { r.header[headerSession] = "tok" }, 400, "InvalidRequest"},
	}
	for _, c := range cases {
		if s, code := cs(c.p, c.bucket, c.mode, c.mut); s != c.status || code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, s, code, c.status, c.code)
		}
	}
	st := x.f.Stats()
	if st.Sessions[ReadWrite] != 1 || st.Sessions[ReadOnly] != 2 {
		t.Fatalf("sessions %+v: want 1 ReadWrite, 2 ReadOnly", st.Sessions)
	}
}

func TestDataRequests(t *testing.T) {
	x := newFixture(t)
	s := x.session(rw, bucket, "")
	put := func(mut func(*req)) (int, string) {
		r := req{method: http.MethodPut, path: "/" + bucket + "/chains/a/0001", query: "x-id=PutObject",
			header: map[string]string{"If-None-Match": "*", "x-amz-checksum-crc32c": "AAAAAA=="}, body: "flight", creds: s}
		if mut != nil {
			mut(&r)
		}
		st, code, _ := x.do(r)
		return st, code
	}
	if st, code := put(nil); st != 200 {
		t.Fatalf("session PUT: %d %s", st, code)
	}
	got := x.up.last()
	if got.method != http.MethodPut || got.path != "/"+bucket+"/chains/a/0001" || string(got.body) != "flight" ||
		got.header.Get("If-None-Match") != "*" || got.header.Get("X-Amz-Checksum-Crc32c") != "AAAAAA==" ||
		got.header.Get(headerSession) != "" || !strings.Contains(got.query, "x-id=PutObject") {
		t.Fatalf("forwarded %+v", got)
	}

	otherS := x.session(rw, other, "")
	roS := x.session(ro, bucket, "")
	cases := []struct {
		name   string
		mut    func(*req)
		status int
		code   string
	}{
		{"no token, session key", func(r *req) { r.creds.SessionToken = "" }, 400, "MissingSecurityHeader"},
		{"no token, long-term key", func(r *req) { r.creds = rw }, 403, "AccessDenied"},
		{"no token, unknown key", func(r *req) { r.creds = aws.Credentials{AccessKeyID: "who", SecretAccessKey: "x"} }, 403, "InvalidAccessKeyId"},
		{"unknown token", func(r *req) { r.creds.SessionToken = "forged" }, 400, "InvalidToken"},
		{"another key's token", func(r *req) { r.creds.SessionToken = roS.SessionToken }, 400, "InvalidToken"},
		{"another bucket's session", func(r *req) { r.creds = otherS }, 403, "AccessDenied"},
		{"wrong session secret", func(r *req) { r.creds.SecretAccessKey = "x" }, 403, "SignatureDoesNotMatch"},
		{"body differs from the signed hash", func(r *req) { r.tamperBody = true }, 400, "XAmzContentSHA256Mismatch"},
		{"service s3", func(r *req) { r.service = "s3" }, 400, "AuthorizationHeaderMalformed"},
		{"read-only session", func(r *req) { r.creds = roS }, 403, "AccessDenied"},
		{"unsupported sub-resource", func(r *req) { r.query = "tagging" }, 501, "NotImplemented"},
	}
	for _, c := range cases {
		if st, code := put(c.mut); st != c.status || code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, st, code, c.status, c.code)
		}
	}
	// A read-only session reads.
	if st, code, _ := x.do(req{method: http.MethodGet, path: "/" + bucket + "/chains/a/0001", creds: roS}); st != 200 {
		t.Fatalf("read-only GET: %d %s", st, code)
	}
	// Copies are signed with long-term keys; a read-only principal may not
	// write the destination.
	cp := req{method: http.MethodPut, path: "/" + bucket + "/settled/x", query: "partNumber=1&uploadId=u1",
		header: map[string]string{"X-Amz-Copy-Source": other + "/chains/a/0001", "X-Amz-Copy-Source-Range": "bytes=0-9"}, creds: rw}
	if st, code, _ := x.do(cp); st != 200 || x.up.last().header.Get("X-Amz-Copy-Source-Range") != "bytes=0-9" {
		t.Fatalf("UploadPartCopy: %d %s %+v", st, code, x.up.last())
	}
	cp.creds = ro
	if st, code, _ := x.do(cp); st != 403 || code != "AccessDenied" {
		t.Fatalf("read-only UploadPartCopy: %d %s", st, code)
	}
	// A general-purpose bucket takes long-term keys (service s3), no session.
	if st, code, _ := x.do(req{method: http.MethodPut, path: "/" + general + "/streams/x", body: "s", creds: rw, service: "s3"}); st != 200 {
		t.Fatalf("general bucket PUT: %d %s", st, code)
	}
	if st, code, _ := x.do(req{method: http.MethodPut, path: "/" + general + "/streams/x", body: "s", creds: s, service: "s3"}); st != 400 || code != "InvalidArgument" {
		t.Fatalf("general bucket PUT with a session: %d %s", st, code)
	}
}

func TestSessionExpiry(t *testing.T) {
	x := newFixture(t)
	s := x.session(rw, bucket, "")
	get := func(signAt time.Time) (int, string) {
		st, code, _ := x.do(req{method: http.MethodGet, path: "/" + bucket + "/k", creds: s, signAt: signAt})
		return st, code
	}
	if st, code := get(time.Time{}); st != 200 {
		t.Fatalf("fresh session: %d %s", st, code)
	}
	// Signed just before expiry, arriving within the grace: accepted.
	x.clk.Add(10 * time.Second)
	if st, code := get(s.Expires.Add(-time.Second)); st != 200 || x.f.Stats().InGrace != 1 {
		t.Fatalf("signed before expiry, in flight: %d %s (in grace: %d)", st, code, x.f.Stats().InGrace)
	}
	// Signed at expiry: refused.
	if st, code := get(s.Expires); st != 400 || code != "ExpiredToken" {
		t.Fatalf("signed at expiry: %d %s", st, code)
	}
	// Signed before expiry but arriving after the grace: refused.
	x.clk.Add(2 * time.Second)
	if st, code := get(s.Expires.Add(-time.Second)); st != 400 || code != "ExpiredToken" {
		t.Fatalf("arrived after the grace: %d %s", st, code)
	}
	// Long gone sessions are forgotten: InvalidToken.
	x.clk.Add(time.Minute)
	x.session(rw, bucket, "") // a CreateSession sweeps
	if st, code := get(time.Time{}); st != 400 || code != "InvalidToken" {
		t.Fatalf("forgotten session: %d %s", st, code)
	}
}

func TestListing(t *testing.T) {
	x := newFixture(t)
	s := x.session(rw, bucket, "")
	st, code, body := x.do(req{method: http.MethodGet, path: "/" + bucket, query: "list-type=2&prefix=k%2F", creds: s})
	if st != 200 {
		t.Fatalf("list: %d %s", st, code)
	}
	var out struct {
		Contents []struct{ Key string }
	}
	if err := xml.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range out.Contents {
		keys = append(keys, c.Key)
	}
	if len(keys) != 20 || slices.IsSorted(keys) {
		t.Fatalf("listing %v: want all 20 keys, unsorted", keys)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if k != fmt.Sprintf("k/%02d", i) {
			t.Fatalf("listing lost or changed keys: %v", keys)
		}
	}
	for _, q := range []string{"list-type=2&prefix=k", "list-type=2&delimiter=%2C", "list-type=2&start-after=k"} {
		if st, code, _ := x.do(req{method: http.MethodGet, path: "/" + bucket, query: q, creds: s}); st != 400 || code != "InvalidArgument" {
			t.Errorf("%s: %d %s, want 400 InvalidArgument", q, st, code)
		}
	}
	// ListObjects (v1) is not served by directory buckets.
	if st, code, _ := x.do(req{method: http.MethodGet, path: "/" + bucket, query: "prefix=k%2F", creds: s}); st != 501 {
		t.Errorf("ListObjects v1: %d %s, want 501", st, code)
	}
}

func TestContentSpans(t *testing.T) {
	page := []byte(`<?xml version="1.0"?><R><Name>n</Name><Contents><Key>a</Key></Contents> <Contents><Key>b</Key></Contents><Contents><Key>c</Key></Contents><IsTruncated>false</IsTruncated></R>`)
	spans := contentSpans(page)
	if len(spans) != 3 {
		t.Fatalf("spans %v", spans)
	}
	out := permuteSpans(page, spans, []int{2, 0, 1})
	if !bytes.Contains(out, []byte(`<Contents><Key>c</Key></Contents><Contents><Key>a</Key></Contents><Contents><Key>b</Key></Contents>`)) ||
		!bytes.HasPrefix(out, []byte(`<?xml version="1.0"?><R><Name>n</Name>`)) || !bytes.HasSuffix(out, []byte(`<IsTruncated>false</IsTruncated></R>`)) {
		t.Fatalf("permuted %s", out)
	}
	// Entries split by another element are left alone.
	if s := contentSpans([]byte(`<R><Contents/><X/><Contents/></R>`)); s != nil {
		t.Fatalf("non-adjacent spans %v", s)
	}
}

func TestIdentify(t *testing.T) {
	h := func(kv ...string) http.Header {
		x := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			x.Set(kv[i], kv[i+1])
		}
		return x
	}
	cases := []struct {
		method, key, query string
		h                  http.Header
		want               Op
	}{
		{"GET", "", "session", nil, OpCreateSession},
		{"GET", "", "list-type=2&prefix=a%2F", nil, OpListObjectsV2},
		{"GET", "", "prefix=a", nil, OpUnsupported},
		{"HEAD", "", "", nil, OpHeadBucket},
		{"POST", "", "delete", nil, OpDeleteObjects},
		{"GET", "k", "x-id=GetObject", nil, OpGetObject},
		{"GET", "k", "uploadId=u", nil, OpListParts},
		{"GET", "k", "acl", nil, OpUnsupported},
		{"HEAD", "k", "", nil, OpHeadObject},
		{"PUT", "k", "x-id=PutObject", nil, OpPutObject},
		{"PUT", "k", "", h("X-Amz-Copy-Source", "b/k"), OpCopyObject},
		{"PUT", "k", "partNumber=1&uploadId=u&x-id=UploadPart", nil, OpUploadPart},
		{"PUT", "k", "partNumber=1&uploadId=u", h("X-Amz-Copy-Source", "b/k"), OpUploadPartCopy},
		{"PUT", "k", "tagging", nil, OpUnsupported},
		{"POST", "k", "uploads", nil, OpCreateMultipartUpload},
		{"POST", "k", "uploadId=u", nil, OpCompleteMultipartUpload},
		{"DELETE", "k", "uploadId=u", nil, OpAbortMultipartUpload},
		{"DELETE", "k", "x-id=DeleteObject", nil, OpDeleteObject},
	}
	for _, c := range cases {
		q, _ := urlQuery(c.query)
		if c.h == nil {
			c.h = http.Header{}
		}
		if got := identify(c.method, c.key, q, c.h); got != c.want {
			t.Errorf("%s %q ?%s: %s, want %s", c.method, c.key, c.query, got, c.want)
		}
	}
	for name, want := range map[string]bool{"b--use1-az4--x-s3": true, "my-bucket--usw2-az1--x-s3": true, "plain": false, "--x-s3": false, "a--x-s3": false} {
		if IsDirectoryBucket(name) != want {
			t.Errorf("IsDirectoryBucket(%q) != %v", name, want)
		}
	}
}

func urlQuery(s string) (map[string][]string, error) { return url.ParseQuery(s) }
