package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func framed(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// Frames back to back come out whole and in order; the size hook runs
// once per frame, after its size and before its body.
func TestFrameReader(t *testing.T) {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 9
	in := kmsg.NewRequestFormatter(kmsg.FormatterClientID("c")).AppendRequest(nil, req, 42)
	in = append(in, framed([]byte("second"))...)
	sizes := 0
	fr := &frameReader{r: bytes.NewReader(in), max: 64, onSize: func() { sizes++ }}
	f1, err := fr.next()
	if err != nil {
		t.Fatal(err)
	}
	h, r, body, err := parseHeader(f1)
	if err != nil || r == nil || h.key != 3 || h.version != 9 || h.correlation != 42 || deref(h.clientID) != "c" {
		t.Fatalf("header %+v, %v", h, err)
	}
	if err := r.ReadFrom(body); err != nil {
		t.Fatalf("body: %v", err)
	}
	if f2, err := fr.next(); err != nil || string(f2) != "second" {
		t.Fatalf("second frame %q, %v", f2, err)
	}
	if _, err := fr.next(); !errors.Is(err, io.EOF) || sizes != 2 {
		t.Fatalf("after the last frame: %v, %d sizes", err, sizes)
	}
	fr = &frameReader{r: bytes.NewReader(framed(make([]byte, 65))), max: 64}
	var fe *FrameError
	if _, err := fr.next(); !errors.As(err, &fe) || fe.Size != 65 {
		t.Fatalf("an oversized frame: %v", err)
	}
	fr = &frameReader{r: bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}), max: 64}
	if _, err := fr.next(); !errors.As(err, &fe) || fe.Size != -1 {
		t.Fatalf("a negative size: %v", err)
	}
	fr = &frameReader{r: bytes.NewReader([]byte{0, 0, 0, 9, 1, 2}), max: 64}
	if _, err := fr.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut frame: %v", err)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// The frame reader and the header and request decoding never panic and
// never hand out more than the bound, whatever the bytes.
func FuzzFrameReader(f *testing.F) {
	for _, req := range []kmsg.Request{kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrMetadataRequest(),
		kmsg.NewPtrProduceRequest(), kmsg.NewPtrFetchRequest(), kmsg.NewPtrSASLAuthenticateRequest()} {
		req.SetVersion(req.MaxVersion())
		f.Add(kmsg.NewRequestFormatter().AppendRequest(nil, req, 1))
	}
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff})
	f.Add(framed([]byte{0, 3, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0}))
	const max = 1 << 12
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := &frameReader{r: bytes.NewReader(in), max: max}
		read := 0
		for range 64 {
			frame, err := fr.next()
			if err != nil {
				var fe *FrameError
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &fe) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(frame) > max {
				t.Fatalf("a frame of %d bytes past the bound %d", len(frame), max)
			}
			read += 4 + len(frame)
			if !bytes.Equal(frame, in[read-len(frame):read]) {
				t.Fatal("a frame is not the bytes that followed its size")
			}
			h, req, body, err := parseHeader(frame)
			if err != nil || req == nil {
				continue
			}
			if servedVersion(h.key, h.version) || unsupported(req) != nil {
				_ = req.ReadFrom(body)
			}
			if p, ok := req.(*kmsg.ProduceRequest); ok && servedVersion(0, h.version) && req.ReadFrom(body) == nil {
				for _, tp := range p.Topics {
					for _, pp := range tp.Partitions {
						_, _ = decodeBatches(pp.Records, new(int64(MaxProduceRecordBytes)))
					}
				}
			}
		}
	})
}

// Record batches of any bytes decode or fail cleanly.
func FuzzDecodeBatches(f *testing.F) {
	f.Add(appendBatch(nil, testRecs{{seq: 0, body: "a"}, {seq: 1, key: "k", body: "b"}}.records()))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		_, _ = decodeBatches(in, new(int64(MaxProduceRecordBytes)))
	})
}
