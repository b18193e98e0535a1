package api

import (
	"bytes"
	stdgzip "compress/gzip"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	"github.com/klauspost/compress/zstd"

	"github.com/starlog/starlog/shared/api/s2pb"
)

func readFrames(t *testing.T, r io.Reader) ([]Frame, error) {
	t.Helper()
	fr := NewFrameReader(r)
	defer fr.Close()
	var out []Frame
	for {
		f, err := fr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		f.Payload = bytes.Clone(f.Payload) // valid only until the next call
		out = append(out, f)
	}
}

func wantFrameErr(t *testing.T, err error, code string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Status != 400 || e.Code != code {
		t.Fatalf("got %v, want 400 %s", err, code)
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

func TestFrameGolden(t *testing.T) {
	var buf bytes.Buffer
	w := NewFrameWriter(&buf, CompressionGzip) // small payloads stay uncompressed
	if err := w.WriteMessage([]byte{0xaa, 0xbb}); err != nil {
		t.Fatal(err)
	}
	if got := buf.Bytes(); !bytes.Equal(got, []byte{0, 0, 3, 0, 0xaa, 0xbb}) {
		t.Fatalf("data frame % x", got)
	}
	buf.Reset()
	if err := w.WriteTerminal(SeqNumMismatch(7)); err != nil {
		t.Fatal(err)
	}
	body := `{"seq_num_mismatch":7}`
	want := append([]byte{0, 0, byte(1 + 2 + len(body)), 0x80, 0x01, 0x9c}, body...)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("terminal frame % x\nwant % x", buf.Bytes(), want)
	}
	buf.Reset()
	w.SetReconnectAdvised(true)
	_ = w.WriteMessage(nil)
	if !bytes.Equal(buf.Bytes(), []byte{0, 0, 1, 0x10}) {
		t.Fatalf("reconnect frame % x", buf.Bytes())
	}
	f, err := NewFrameReader(&buf).Next()
	if err != nil || !f.ReconnectAdvised || f.Terminal || len(f.Payload) != 0 {
		t.Fatalf("reconnect frame read back as %+v %v", f, err)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	small := []byte("tiny")
	compressible := bytes.Repeat([]byte("starlog record "), 500) // 7.5 KiB
	noise := make([]byte, 4096)
	x := uint32(1)
	for i := range noise { // xorshift: incompressible
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		noise[i] = byte(x)
	}
	maxPayload := bytes.Repeat([]byte{'z'}, MaxFramePayload)
	for _, c := range []Compression{CompressionNone, CompressionGzip, CompressionZstd} {
		t.Run(c.String(), func(t *testing.T) {
			var buf bytes.Buffer
			w := NewFrameWriter(&buf, c)
			defer w.Close()
			payloads := [][]byte{small, compressible, noise, maxPayload, {}}
			for _, p := range payloads {
				if err := w.WriteMessage(p); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.WriteTerminal(StreamNotFound("gone")); err != nil {
				t.Fatal(err)
			}
			// Small reads: the reader must not depend on read sizes.
			frames, err := readFrames(t, iotest.HalfReader(bytes.NewReader(buf.Bytes())))
			if err != nil {
				t.Fatal(err)
			}
			if len(frames) != len(payloads)+1 {
				t.Fatalf("%d frames", len(frames))
			}
			for i, p := range payloads {
				f := frames[i]
				if f.Terminal || !bytes.Equal(f.Payload, p) {
					t.Fatalf("frame %d: terminal=%v len %d, want len %d", i, f.Terminal, len(f.Payload), len(p))
				}
			}
			// Compressed exactly when ≥ 1 KiB and it helps.
			if got := frames[0].Compression; got != CompressionNone {
				t.Errorf("small payload sent with %v", got)
			}
			if got := frames[1].Compression; got != c {
				t.Errorf("compressible payload sent with %v, want %v", got, c)
			}
			if got := frames[2].Compression; got != CompressionNone {
				t.Errorf("incompressible payload sent with %v", got)
			}
			if got := frames[3].Compression; got != c {
				t.Errorf("max payload sent with %v, want %v", got, c)
			}
			term := frames[len(frames)-1]
			if !term.Terminal || term.Status != 404 || term.Compression != CompressionNone {
				t.Fatalf("terminal %+v", term)
			}
			if e := term.Err(); e.Code != CodeStreamNotFound || e.Message != "gone" {
				t.Fatalf("terminal error %+v", e)
			}
			if frames[0].Err() != nil {
				t.Fatal("data frame reports an error")
			}
		})
	}
}

// Frames compressed by other encoders (the standard library's gzip, a
// default zstd encoder) decode too.
func TestFrameReaderForeignEncoders(t *testing.T) {
	payload := bytes.Repeat([]byte("interop "), 300)
	var gz bytes.Buffer
	zw := stdgzip.NewWriter(&gz)
	_, _ = zw.Write(payload)
	_ = zw.Close()
	enc, _ := zstd.NewWriter(nil)
	zs := enc.EncodeAll(payload, nil)
	_ = enc.Close()

	var stream []byte
	stream = AppendFrame(stream, byte(CompressionGzip)<<5, gz.Bytes())
	stream = AppendFrame(stream, byte(CompressionZstd)<<5, zs)
	frames, err := readFrames(t, bytes.NewReader(stream))
	if err != nil || len(frames) != 2 {
		t.Fatalf("%d frames, %v", len(frames), err)
	}
	for _, f := range frames {
		if !bytes.Equal(f.Payload, payload) {
			t.Fatalf("%v payload differs", f.Compression)
		}
	}
}

func TestFrameReaderRejects(t *testing.T) {
	cases := []struct {
		name  string
		bytes []byte
	}{
		{"zero length", []byte{0, 0, 0}},
		{"too long", []byte{0x20, 0x00, 0x01, 0x00}},
		{"reserved bits", []byte{0, 0, 1, 0x01}},
		{"compression 3", []byte{0, 0, 1, 0x60}},
		{"terminal without status", []byte{0, 0, 2, 0x80, 0x01}},
		{"bad gzip", []byte{0, 0, 3, 0x40, 1, 2}},
		{"bad zstd", []byte{0, 0, 3, 0x20, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewFrameReader(bytes.NewReader(c.bytes)).Next()
			if c.name == "zero length" {
				// Three bytes then EOF: a truncated header, not a bad frame.
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("got %v", err)
				}
				_, err = NewFrameReader(bytes.NewReader([]byte{0, 0, 0, 0})).Next()
			}
			wantFrameErr(t, err, CodeBadFrame)
		})
	}
	// Exactly MaxFrameLen is allowed.
	ok := AppendFrame(nil, 0, make([]byte, MaxFramePayload))
	if _, err := NewFrameReader(bytes.NewReader(ok)).Next(); err != nil {
		t.Fatalf("max frame: %v", err)
	}
	// Truncation inside a frame is unexpected, at a boundary it is the end.
	if _, err := NewFrameReader(bytes.NewReader([]byte{0, 0, 5, 0, 1})).Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated payload: %v", err)
	}
	if _, err := NewFrameReader(bytes.NewReader(nil)).Next(); err != io.EOF {
		t.Fatalf("empty stream: %v", err)
	}
	rerr := errors.New("reset")
	if _, err := NewFrameReader(iotest.ErrReader(rerr)).Next(); !errors.Is(err, rerr) {
		t.Fatalf("read error: %v", err)
	}
}

// heapGrowth runs f and reports how many bytes it allocated.
func heapGrowth(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A payload that inflates far past the limit fails as bad_frame without
// allocating anywhere near its inflated size.
func TestFrameReaderDecompressionBombs(t *testing.T) {
	const inflated = 64 << 20 // 64 MiB of zeros, 32 times the limit
	var gz bytes.Buffer
	zw, _ := stdgzip.NewWriterLevel(&gz, stdgzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for i := 0; i < inflated/len(zeros); i++ {
		_, _ = zw.Write(zeros)
	}
	_ = zw.Close()
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	var zs []byte
	{
		var zb bytes.Buffer
		enc.Reset(&zb)
		for i := 0; i < inflated/len(zeros); i++ {
			_, _ = enc.Write(zeros)
		}
		_ = enc.Close()
		zs = zb.Bytes()
	}
	// A window within the decoder's bound and no content size in the header,
	// so only the running output bound can stop it.
	var zsSmallWindow []byte
	{
		var zb bytes.Buffer
		e, _ := zstd.NewWriter(&zb, zstd.WithWindowSize(1<<20))
		for i := 0; i < inflated/len(zeros); i++ {
			_, _ = e.Write(zeros)
		}
		_ = e.Close()
		zsSmallWindow = zb.Bytes()
	}
	// Many frames, each within bounds, adding up past the limit.
	var zsConcat []byte
	{
		e, _ := zstd.NewWriter(nil)
		for i := 0; i < inflated/len(zeros); i++ {
			zsConcat = e.EncodeAll(zeros, zsConcat)
		}
		_ = e.Close()
	}
	for _, c := range []struct {
		name    string
		comp    Compression
		payload []byte
	}{
		{"gzip", CompressionGzip, gz.Bytes()},
		{"zstd", CompressionZstd, zs},
		{"zstd small window", CompressionZstd, zsSmallWindow},
		{"zstd concatenated", CompressionZstd, zsConcat},
	} {
		t.Run(c.name, func(t *testing.T) {
			if len(c.payload) > MaxFramePayload {
				t.Fatalf("bomb of %d bytes does not fit a frame", len(c.payload))
			}
			frame := AppendFrame(nil, byte(c.comp)<<5, c.payload)
			var err error
			grew := heapGrowth(func() {
				fr := NewFrameReader(bytes.NewReader(frame))
				_, err = fr.Next()
				fr.Close()
			})
			wantFrameErr(t, err, CodeBadFrame)
			if grew > 16<<20 {
				t.Fatalf("decoding a %d-byte bomb allocated %d MiB", len(c.payload), grew>>20)
			}
			t.Logf("%s bomb: %d compressed bytes, %d KiB allocated", c.name, len(c.payload), grew>>10)
		})
	}
}

func TestFrameWriterLimitsAndErrors(t *testing.T) {
	w := NewFrameWriter(io.Discard, CompressionNone)
	if err := w.WriteMessage(make([]byte, MaxFramePayload+1)); err == nil {
		t.Fatal("oversized payload written")
	}
	var buf bytes.Buffer
	if err := NewFrameWriter(&buf, CompressionNone).WriteProto(&s2pb.AppendAck{Start: &s2pb.StreamPosition{SeqNum: 1}}); err != nil {
		t.Fatal(err)
	}
	f, err := NewFrameReader(&buf).Next()
	if err != nil {
		t.Fatal(err)
	}
	if ack, derr := DecodeAppendAckProto(f.Payload); derr != nil || ack.Start.SeqNum != 1 {
		t.Fatalf("ack %+v %v", ack, derr)
	}
	werr := errors.New("closed")
	if err := NewFrameWriter(errWriter{werr}, CompressionNone).WriteMessage([]byte("x")); !errors.Is(err, werr) {
		t.Fatalf("write error: %v", err)
	}
}

// A header that announces MaxFrameLen followed by a trickle must cost the
// reader what arrived, not what was announced (issue 13 item 7: 250
// stalled sessions held 536 MB). Started fires once the header is in.
func TestFrameReaderAllocatesAsBytesArrive(t *testing.T) {
	n := MaxFrameLen
	hdr := []byte{byte(n >> 16), byte(n >> 8), byte(n), 0}
	src := io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(make([]byte, 100)))
	fr := NewFrameReader(src)
	defer fr.Close()
	started := 0
	fr.Started = func() { started++ }
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := fr.Next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame cut short: want io.ErrUnexpectedEOF, got %v", err)
	}
	if started != 1 {
		t.Fatalf("Started called %d times, want 1", started)
	}
	// One chunk (32 KiB) plus slack, against 2 MiB announced.
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
		t.Fatalf("reading 100 bytes of an announced %d-byte frame allocated %d bytes", MaxFrameLen, got)
	}

	// A whole big frame still reads, and its buffer is not kept.
	payload := bytes.Repeat([]byte{7}, MaxFramePayload)
	fr = NewFrameReader(bytes.NewReader(AppendFrame(AppendFrame(nil, 0, payload), 0, []byte("x"))))
	defer fr.Close()
	f, err := fr.Next()
	if err != nil || !bytes.Equal(f.Payload, payload) {
		t.Fatalf("big frame: %v (payload %d bytes)", err, len(f.Payload))
	}
	if f, err = fr.Next(); err != nil || string(f.Payload) != "x" {
		t.Fatalf("frame after a big one: %v %q", err, f.Payload)
	}
	if cap(fr.in) > frameKeep {
		t.Fatalf("reader keeps a %d-byte buffer after a big frame", cap(fr.in))
	}
}
