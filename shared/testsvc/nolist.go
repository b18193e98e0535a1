package testsvc

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// accessDeniedBody is S3's answer to a request it refuses for permission.
const accessDeniedBody = `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>AccessDenied</Code><Message>Access Denied</Message><RequestId>nolist</RequestId></Error>`

// NoListBucket starts a front on loopback before the S3 endpoint upstream
// that answers as S3 Standard does a caller without s3:ListBucket on the
// bucket: a GET or HEAD of a missing key is 403 AccessDenied, not 404.
// Everything else passes through (path-style requests; the Host header is
// the front's, which is what the client signed). It returns the front's
// URL.
func NoListBucket(tb testing.TB, upstream string) string {
	tb.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		tb.Fatalf("testsvc: nolist upstream: %v", err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(res *http.Response) error {
		r := res.Request
		isObject := strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1
		if res.StatusCode != http.StatusNotFound || !isObject || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			return nil
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if r.Method == http.MethodGet && !bytes.Contains(body, []byte("NoSuchKey")) {
			res.Body = io.NopCloser(bytes.NewReader(body)) // a missing bucket stays 404
			return nil
		}
		res.StatusCode, res.Status = http.StatusForbidden, "403 Forbidden"
		res.Header.Set("Content-Type", "application/xml")
		out := []byte(accessDeniedBody)
		if r.Method == http.MethodHead {
			out = nil
		}
		res.Header.Set("Content-Length", strconv.Itoa(len(out)))
		res.ContentLength = int64(len(out))
		res.Body = io.NopCloser(bytes.NewReader(out))
		return nil
	}
	srv := httptest.NewServer(rp)
	tb.Cleanup(srv.Close)
	return srv.URL
}
