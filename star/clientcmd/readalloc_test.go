package clientcmd

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// framesTransport answers every session request with the same S2S body:
// the server side costs the test process no allocation per batch.
type framesTransport struct{ body []byte }

func (f framesTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", api.ContentTypeS2S)
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(bytes.NewReader(f.body)), Request: r}, nil
}

// star read writes each batch out before it reads the next frame, so it
// decodes batches in place: reading 32 batches of ~1 MiB allocates far
// less than the bytes read (copying every batch out of its frame
// allocated at least the bytes read, in fresh memory the kernel must
// fault in: a third of star read's CPU on a catch-up read).
func TestReadDecodesBatchesInPlace(t *testing.T) {
	const batches, perBatch = 32, 1000
	ts := uint64(1)
	body := bytes.Repeat([]byte("x"), 1016)
	var frames []byte
	for b := range batches {
		batch := &api.ReadBatch{}
		for i := range perBatch {
			batch.Records = append(batch.Records, api.Record{SeqNum: uint64(b*perBatch + i), Timestamp: &ts, Body: body})
		}
		frames = api.AppendFrame(frames, 0, api.AppendReadBatchProto(nil, batch))
	}
	c, err := sdk.New(sdk.Config{AccountEndpoint: "http://127.0.0.1:1", SessionClient: &http.Client{Transport: framesTransport{frames}}})
	if err != nil {
		t.Fatal(err)
	}
	var out countingWriter
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = runRead(t.Context(), c.Basin(testBasin).Stream("s"), api.ReadRequest{}, readLimit{}, &out, io.Discard, formatText)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(batches * perBatch * (len(body) + 1)); out.n != want {
		t.Fatalf("wrote %d bytes, want %d", out.n, want)
	}
	read := uint64(len(frames))
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("reading %d bytes of batches allocated %d bytes", read, alloc)
	if alloc > read/4 {
		t.Fatalf("reading %d bytes of batches allocated %d bytes, want at most a quarter", read, alloc)
	}
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
