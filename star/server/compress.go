package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/starlog/starlog/shared/api"
)

// Compressed unary bodies, as S2 takes and sends them (s2-lite wraps its
// router in tower-http's request decompression and response compression).
//
// A request body may be Content-Encoding gzip or zstd (one coding, or
// identity). The compressed body is bounded as any body is, and the
// decompressed one by the same limit: decompression stops one byte past
// it, so a small bomb costs at most the limit in memory before it is 422.
// A response of at least minCompressBytes is compressed when the request's
// Accept-Encoding takes zstd or gzip (zstd preferred); sessions (SSE,
// S2S) are not: S2S compresses per frame, and SSE must flush per event.

// minCompressBytes is the smallest response worth compressing (s2-lite's
// threshold too).
const minCompressBytes = 1024

// maxZstdWindow bounds the window a zstd body may ask the decoder for
// (zstd's own default levels stay within 8 MiB); a frame that wants more
// is refused rather than allocated.
const maxZstdWindow = 8 << 20

// codecs holds the zstd coder state shared by every request: EncodeAll and
// DecodeAll are safe for concurrent use.
type codecs struct {
	zdec *zstd.Decoder
	zenc *zstd.Encoder
}

func newCodecs() (*codecs, error) {
	// MaxMemory bounds what one DecodeAll may produce; the per-route limit
	// (never above it) is checked on the result.
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(uint64(maxBodyLimit)+1),
		zstd.WithDecoderMaxWindow(maxZstdWindow))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	return &codecs{zdec: d, zenc: e}, nil
}

// maxBodyLimit is the largest limit readBody is called with.
const maxBodyLimit = max(api.MaxAppendJSONBodyBytes, api.MaxAppendProtoBodyBytes, api.MaxResourceJSONBytes)

// contentCoding reads the request's Content-Encoding: "" for none or
// identity, "gzip" or "zstd"; any other, or a stack of codings, is 400
// bad_header (S2 decodes one coding and refuses the rest).
func contentCoding(r *http.Request) (string, *api.Error) {
	vs := r.Header.Values("Content-Encoding")
	coding := ""
	for _, v := range vs {
		for _, part := range strings.Split(v, ",") {
			c := strings.ToLower(strings.TrimSpace(part))
			switch c {
			case "", "identity":
				continue
			case "gzip", "x-gzip", "zstd":
				if coding != "" {
					return "", api.BadHeader("Content-Encoding: one coding at most, got %q", truncate(strings.Join(vs, ", "), 64))
				}
				coding = strings.TrimPrefix(c, "x-")
			default:
				return "", api.BadHeader("Content-Encoding %q is not supported: send gzip, zstd or identity", truncate(c, 32))
			}
		}
	}
	return coding, nil
}

// decompress decodes body of coding, failing with 422 invalid once the
// decoded size passes limit and with truncated's code when it does not
// decode.
func (c *codecs) decompress(coding string, body []byte, limit int64, truncated func(string, ...any) *api.Error) ([]byte, *api.Error) {
	tooBig := func() *api.Error {
		return api.Invalid("decompressed request body exceeds %d bytes", limit)
	}
	switch coding {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, truncated("gzip body: %v", err)
		}
		defer zr.Close()
		out, err := io.ReadAll(io.LimitReader(zr, limit+1))
		if err != nil {
			return nil, truncated("gzip body: %v", err)
		}
		if int64(len(out)) > limit {
			return nil, tooBig()
		}
		return out, nil
	case "zstd":
		out, err := c.zdec.DecodeAll(body, nil)
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) || err == nil && int64(len(out)) > limit {
			return nil, tooBig()
		}
		if err != nil {
			return nil, truncated("zstd body: %v", err)
		}
		return out, nil
	}
	return body, nil
}

// responseCoding picks a unary response's coding from Accept-Encoding.
func responseCoding(r *http.Request) string {
	switch api.NegotiateCompression(r.Header.Values("Accept-Encoding")...) {
	case api.CompressionZstd:
		return "zstd"
	case api.CompressionGzip:
		return "gzip"
	}
	return ""
}

// compressBody encodes a response body for coding (false: send it as is).
func (c *codecs) compressBody(coding string, body []byte) ([]byte, bool) {
	if len(body) < minCompressBytes {
		return nil, false
	}
	switch coding {
	case "zstd":
		return c.zenc.EncodeAll(body, make([]byte, 0, len(body)/2)), true
	case "gzip":
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed) // a valid level cannot fail
		if _, err := zw.Write(body); err != nil || zw.Close() != nil {
			return nil, false
		}
		return b.Bytes(), true
	}
	return nil, false
}
