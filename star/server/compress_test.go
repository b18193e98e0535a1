package server_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/starlog/starlog/shared/api"
)

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil || zw.Close() != nil {
		t.Fatal("gzip")
	}
	return buf.Bytes()
}

func zstded(t *testing.T, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// Unary request bodies may come gzip or zstd compressed (as S2 takes
// them); a body that decompresses past the route's bound is 422 and
// nothing is applied; responses are compressed on Accept-Encoding.
func TestCompressedBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("zip-basin")
	jsonH := []string{"Content-Type", "application/json"}
	body := []byte(textRecords("z", 50))

	r := e.stream("zip-basin", "POST", "streams/z/records", gzipped(t, body), "Content-Encoding", "gzip")
	want(t, r, 200, "")
	r = e.stream("zip-basin", "POST", "streams/z/records", zstded(t, body), "Content-Encoding", "zstd")
	want(t, r, 200, "")
	pb, _ := api.EncodeAppendProto(batch("p", 10))
	r = e.call("POST", "streams/z/records", zstded(t, pb), "s2-basin", "zip-basin", "Content-Type", "application/protobuf", "Content-Encoding", "zstd")
	want(t, r, 200, "")
	// A resource body too.
	r = e.call("POST", "basins", gzipped(t, []byte(`{"basin":"zip-basin2"}`)), append(jsonH, "Content-Encoding", "gzip")...)
	want(t, r, 201, "")
	if tail := e.tail("zip-basin", "z"); tail.SeqNum != 110 {
		t.Fatalf("tail %d after three compressed appends, want 110", tail.SeqNum)
	}

	// Zip bombs: small on the wire, past the 8 MiB append bound decoded.
	bomb := bytes.Repeat([]byte(" "), api.MaxAppendJSONBodyBytes+1)
	for _, c := range []struct {
		coding string
		body   []byte
	}{{"gzip", gzipped(t, bomb)}, {"zstd", zstded(t, bomb)}} {
		if len(c.body) > 1<<20 {
			t.Fatalf("%s bomb of %d bytes is not small", c.coding, len(c.body))
		}
		r = e.stream("zip-basin", "POST", "streams/z/records", c.body, "Content-Encoding", c.coding)
		want(t, r, 422, api.CodeInvalid)
	}
	// A resource body's bound (1 MiB) holds decoded too.
	big := gzipped(t, []byte(`{"basin":"zip-basin3","x":"`+strings.Repeat("y", api.MaxResourceJSONBytes)+`"}`))
	want(t, e.call("POST", "basins", big, append(jsonH, "Content-Encoding", "gzip")...), 422, api.CodeInvalid)
	// Not what it says, an unknown coding, a stack of codings.
	want(t, e.stream("zip-basin", "POST", "streams/z/records", body, "Content-Encoding", "gzip"), 400, api.CodeBadJSON)
	want(t, e.stream("zip-basin", "POST", "streams/z/records", body, "Content-Encoding", "zstd"), 400, api.CodeBadJSON)
	want(t, e.stream("zip-basin", "POST", "streams/z/records", body, "Content-Encoding", "br"), 400, api.CodeBadHeader)
	want(t, e.stream("zip-basin", "POST", "streams/z/records", gzipped(t, gzipped(t, body)), "Content-Encoding", "gzip, gzip"), 400, api.CodeBadHeader)
	want(t, e.stream("zip-basin", "POST", "streams/z/records", body, "Content-Encoding", "identity"), 200, "")
	if tail := e.tail("zip-basin", "z"); tail.SeqNum != 160 {
		t.Fatalf("tail %d: a refused compressed append applied records", tail.SeqNum)
	}

	// Responses: compressed when asked and big enough, plain otherwise.
	plain := e.stream("zip-basin", "GET", "streams/z/records?seq_num=0&count=100", nil)
	want(t, plain, 200, "")
	if plain.header.Get("Content-Encoding") != "" || len(plain.body) < 1024 {
		t.Fatalf("uncompressed read: encoding %q, %d bytes", plain.header.Get("Content-Encoding"), len(plain.body))
	}
	for _, c := range []struct{ accept, coding string }{{"gzip", "gzip"}, {"zstd", "zstd"}, {"gzip, zstd;q=0.5", "zstd"}, {"zstd;q=0, gzip", "gzip"}} {
		r := e.stream("zip-basin", "GET", "streams/z/records?seq_num=0&count=100", nil, "Accept-Encoding", c.accept)
		want(t, r, 200, "")
		if got := r.header.Get("Content-Encoding"); got != c.coding {
			t.Fatalf("Accept-Encoding %q: Content-Encoding %q, want %q", c.accept, got, c.coding)
		}
		var out []byte
		switch c.coding {
		case "gzip":
			zr, err := gzip.NewReader(bytes.NewReader(r.body))
			if err != nil {
				t.Fatal(err)
			}
			out, _ = io.ReadAll(zr)
		case "zstd":
			d, _ := zstd.NewReader(nil)
			out, _ = d.DecodeAll(r.body, nil)
			d.Close()
		}
		if !bytes.Equal(out, plain.body) {
			t.Fatalf("Accept-Encoding %q: decoded body differs from the plain one", c.accept)
		}
	}
	// Small responses go as they are.
	r = e.stream("zip-basin", "GET", "streams/z/records/tail", nil, "Accept-Encoding", "gzip")
	if r.status != 200 || r.header.Get("Content-Encoding") != "" {
		t.Fatalf("small response: %s %q", r, r.header.Get("Content-Encoding"))
	}
}
