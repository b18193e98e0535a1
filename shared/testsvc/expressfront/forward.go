package expressfront

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// maxListing bounds a ListObjectsV2 page the front reads to reorder.
const maxListing = 16 << 20

// dropRequest are the incoming headers never forwarded: the client's
// authentication (the front re-signs), and hop-by-hop headers.
var dropRequest = map[string]bool{
	"Authorization": true, headerDate: true, headerContentHash: true,
	headerSession: true, headerSecurity: true, headerMode: true,
	"Content-Length": true, "Connection": true, "Keep-Alive": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Expect": true,
}

// dropResponse are the upstream's hop-by-hop answer headers.
var dropResponse = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true,
	"Trailer": true, "Upgrade": true,
}

func isHexHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// forward sends the request upstream, path style, re-signed with the
// upstream's keys (service "s3"), with the same body, query and headers
// (conditional, checksum, copy-source and range headers included), and
// copies the answer back. A directory bucket's ListObjectsV2 page comes
// back reordered.
func (f *Front) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request, body []byte, payloadHash string) *s3Error {
	out, err := f.upstreamRequest(ctx, r.Method, "/"+req.bucket+req.keyPath, r.URL.RawQuery, r.Header, body, payloadHash)
	if err != nil {
		return err
	}
	resp, derr := f.cfg.Client.Do(out)
	if derr != nil {
		// The upstream did not answer: let the client see a dropped reply,
		// as it would from S3, rather than a made-up status.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, herr := hj.Hijack(); herr == nil {
				_ = conn.Close()
				return nil
			}
		}
		return errInternal("upstream: " + derr.Error())
	}
	defer resp.Body.Close()
	f.mu.Lock()
	f.stats.Forwarded[req.op]++
	f.mu.Unlock()

	var rewritten []byte
	if req.directory && req.op == OpListObjectsV2 && resp.StatusCode == http.StatusOK {
		page, rerr := io.ReadAll(io.LimitReader(resp.Body, maxListing+1))
		if rerr != nil || len(page) > maxListing {
			return errInternal("upstream listing unreadable or too large")
		}
		rewritten = f.shuffleListing(page)
	}
	for k, vs := range resp.Header {
		if dropResponse[k] || (rewritten != nil && k == "Content-Length") {
			continue
		}
		w.Header()[k] = vs
	}
	if rewritten != nil {
		w.Header().Set("Content-Length", strconv.Itoa(len(rewritten)))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(rewritten)
		return nil
	}
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, resp.Body)
	}
	return nil
}

// upstreamRequest builds a request to the upstream and signs it with the
// SDK's SigV4 signer. The body is a bytes.Reader: seekable, so the
// transport may replay it.
func (f *Front) upstreamRequest(ctx context.Context, method, escapedPath, rawQuery string, h http.Header, body []byte, payloadHash string) (*http.Request, *s3Error) {
	path, err := url.PathUnescape(escapedPath)
	if err != nil {
		return nil, errInvalidRequest("bad path escaping")
	}
	u := &url.URL{Scheme: f.upstream.Scheme, Host: f.upstream.Host, Path: path, RawPath: escapedPath, RawQuery: rawQuery}
	out, rerr := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if rerr != nil {
		return nil, errInternal("upstream request: " + rerr.Error())
	}
	out.URL = u // keep the exact escaping the client signed
	out.ContentLength = int64(len(body))
	if len(body) == 0 {
		out.Body = http.NoBody
	}
	for k, vs := range h {
		if !dropRequest[k] {
			out.Header[k] = vs
		}
	}
	if !isHexHash(payloadHash) && payloadHash != "UNSIGNED-PAYLOAD" && !strings.HasPrefix(payloadHash, "STREAMING-UNSIGNED-PAYLOAD") {
		payloadHash = sha256Hex(body)
	}
	out.Header.Set(headerContentHash, payloadHash)
	signer := v4.NewSigner()
	if err := signer.SignHTTP(ctx, aws.Credentials{AccessKeyID: f.cfg.UpstreamAccessKey, SecretAccessKey: f.cfg.UpstreamSecretKey},
		out, payloadHash, "s3", f.cfg.Region, f.cfg.Now(), func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }); err != nil {
		return nil, errInternal("signing upstream: " + err.Error())
	}
	return out, nil
}

// bucketExists asks the upstream (HeadBucket).
func (f *Front) bucketExists(ctx context.Context, bucket string) (bool, *s3Error) {
	out, err := f.upstreamRequest(ctx, http.MethodHead, "/"+bucket, "", http.Header{}, nil, sha256Hex(nil))
	if err != nil {
		return false, err
	}
	resp, derr := f.cfg.Client.Do(out)
	if derr != nil {
		return false, &s3Error{http.StatusServiceUnavailable, "ServiceUnavailable", "upstream: " + derr.Error()}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		return true, nil
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	}
	return false, &s3Error{http.StatusServiceUnavailable, "ServiceUnavailable", "upstream HeadBucket answered " + resp.Status}
}

// shuffleListing reorders the <Contents> entries of one ListObjectsV2 page,
// as a directory bucket returns them unsorted. A page it cannot parse, or
// whose entries are not adjacent, comes back unchanged.
func (f *Front) shuffleListing(page []byte) []byte {
	spans := contentSpans(page)
	if len(spans) < 2 {
		return page
	}
	f.mu.Lock()
	perm := f.rng.Perm(len(spans))
	f.stats.ShuffledPages++
	f.mu.Unlock()
	return permuteSpans(page, spans, perm)
}

type span struct{ start, end int64 }

// contentSpans finds the byte ranges of the top-level <Contents> elements,
// or nil if they are not one adjacent run (whitespace between is fine).
func contentSpans(page []byte) []span {
	dec := xml.NewDecoder(bytes.NewReader(page))
	var spans []span
	depth := 0
	var start int64
	for {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 2 && t.Name.Local == "Contents" {
				start = off
			}
		case xml.EndElement:
			if depth == 2 && t.Name.Local == "Contents" {
				spans = append(spans, span{start, dec.InputOffset()})
			}
			depth--
		}
	}
	for i := 1; i < len(spans); i++ {
		if len(bytes.TrimSpace(page[spans[i-1].end:spans[i].start])) != 0 {
			return nil
		}
	}
	return spans
}

func permuteSpans(page []byte, spans []span, perm []int) []byte {
	first, last := spans[0].start, spans[len(spans)-1].end
	out := make([]byte, 0, len(page))
	out = append(out, page[:first]...)
	for _, i := range perm {
		out = append(out, page[spans[i].start:spans[i].end]...)
	}
	return append(out, page[last:]...)
}

func writeXML(w http.ResponseWriter, requestID string, v any) {
	b, err := xml.Marshal(v)
	if err != nil {
		errInternal(err.Error()).write(w, &http.Request{Method: http.MethodGet, URL: &url.URL{}}, requestID)
		return
	}
	body := append([]byte(xml.Header), b...)
	w.Header().Set("x-amz-request-id", requestID)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
