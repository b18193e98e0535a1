package api

import (
	"strconv"
	"strings"
	"time"
)

// Request and response header names (canonical HTTP/1.1 spelling; HTTP/2
// lower-cases them on the wire).
const (
	HeaderBasin           = "S2-Basin"
	HeaderFormat          = "S2-Format"
	HeaderRequestToken    = "S2-Request-Token"
	HeaderStreamConfig    = "S2-Stream-Config"
	HeaderEncryptionKey   = "S2-Encryption-Key"
	HeaderProvisionResult = "S2-Provision-Result"
	HeaderLastEventID     = "Last-Event-ID"
	HeaderRetryAfter      = "Retry-After"
	HeaderRetryAfterMs    = "Retry-After-Ms"
)

// Values of the S2-Provision-Result response header (PUT ensure).
const (
	ProvisionCreated = "created"
	ProvisionUpdated = "updated"
	ProvisionNoop    = "noop"
)

// Media types.
const (
	ContentTypeJSON  = "application/json"
	ContentTypeProto = "application/protobuf"
	ContentTypeSSE   = "text/event-stream"
	ContentTypeS2S   = "s2s/proto"
)

// Format is the interpretation of record bytes (header names, values and
// bodies) in JSON, chosen by the S2-Format header.
type Format uint8

const (
	// FormatRaw carries bytes as UTF-8 text; reads replace invalid UTF-8
	// with U+FFFD (lossy). Header values "raw" (default) and "json".
	FormatRaw Format = iota
	// FormatBase64 carries bytes as standard padded base64. Header values
	// "base64" and "json-binsafe".
	FormatBase64
)

func (f Format) String() string {
	if f == FormatBase64 {
		return "base64"
	}
	return "raw"
}

// ParseFormat parses the S2-Format header; empty means raw.
func ParseFormat(v string) (Format, *Error) {
	switch strings.TrimSpace(v) {
	case "", "raw", "json":
		return FormatRaw, nil
	case "base64", "json-binsafe":
		return FormatBase64, nil
	}
	return FormatRaw, BadHeader("invalid s2-format %q: want raw, json, base64 or json-binsafe", v)
}

// MediaType is a body kind the API distinguishes.
type MediaType uint8

const (
	// MediaNone: the header is absent or empty.
	MediaNone MediaType = iota
	// MediaOther: a media type the API does not speak.
	MediaOther
	MediaJSON
	MediaProto
	MediaSSE
	MediaS2S
)

// ParseMediaType classifies the first media type of a Content-Type or
// Accept header value, as S2 does (later Accept entries and q-values are
// ignored). JSON includes any application/*+json; protobuf includes
// application/x-protobuf.
func ParseMediaType(v string) MediaType {
	first, _, _ := strings.Cut(v, ",")
	mt, _, _ := strings.Cut(first, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if mt == "" {
		return MediaNone
	}
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || typ == "" || sub == "" {
		return MediaOther
	}
	switch {
	case typ == "application" && (sub == "json" || strings.HasSuffix(sub, "+json")):
		return MediaJSON
	case typ == "application" && (sub == "protobuf" || sub == "x-protobuf"):
		return MediaProto
	case typ == "text" && sub == "event-stream":
		return MediaSSE
	case typ == "s2s" && sub == "proto":
		return MediaS2S
	}
	return MediaOther
}

// Compression is the codec of s2s frame payloads; the values are the flag
// byte's compression bits.
type Compression uint8

const (
	CompressionNone Compression = 0
	CompressionZstd Compression = 1
	CompressionGzip Compression = 2
)

func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionZstd:
		return "zstd"
	case CompressionGzip:
		return "gzip"
	}
	return "compression(" + strconv.Itoa(int(c)) + ")"
}

// NegotiateCompression picks the server-to-client codec of an s2s session
// from the request's Accept-Encoding values: zstd if accepted, else gzip,
// else none. An encoding listed with q=0 is refused.
func NegotiateCompression(acceptEncoding ...string) Compression {
	gzip := false
	for _, v := range acceptEncoding {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name != "zstd" && name != "gzip" {
				continue
			}
			if refusedByQ(params) {
				continue
			}
			if name == "zstd" {
				return CompressionZstd
			}
			gzip = true
		}
	}
	if gzip {
		return CompressionGzip
	}
	return CompressionNone
}

// refusedByQ reports whether Accept-Encoding parameters carry q=0.
func refusedByQ(params string) bool {
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return err == nil && q == 0
	}
	return false
}

// ParseRetryAfter reads a 429's wait from retry-after-ms (milliseconds, as
// S2's Rust SDK reads it) or else Retry-After (whole seconds; an HTTP date
// is not used by S2 and is ignored). Zero when absent or malformed; any
// u64 saturates at the largest Duration (the SDK caps the wait at
// RetryPolicy.MaxRetryAfter), so a huge hint never reads as "retry now".
func ParseRetryAfter(get func(string) string) time.Duration {
	if ms, err := strconv.ParseUint(strings.TrimSpace(get(HeaderRetryAfterMs)), 10, 64); err == nil {
		return Millis(ms)
	}
	if s, err := strconv.ParseUint(strings.TrimSpace(get(HeaderRetryAfter)), 10, 64); err == nil {
		return Seconds(s)
	}
	return 0
}
