package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kerr"
)

// xerial frames blocks as Kafka's Java client does.
func xerial(blocks ...[]byte) []byte {
	out := append(append([]byte{}, xerialMagic...), 0, 0, 0, 1, 0, 0, 0, 1)
	for _, b := range blocks {
		enc := s2.EncodeSnappy(nil, b)
		out = binary.BigEndian.AppendUint32(out, uint32(len(enc)))
		out = append(out, enc...)
	}
	return out
}

// Snappy's xerial framing decodes block after block, and the blocks'
// sum is held to the limit: limit bytes pass, limit+1 are refused before
// the block that would pass it is decoded.
func TestUnsnappyXerialBounded(t *testing.T) {
	a, b := bytes.Repeat([]byte("a"), 40<<10), bytes.Repeat([]byte("b"), 10)
	src := xerial(a, b)
	out, err := decompress(src, codecSnappy, int64(len(a)+len(b)))
	if err != nil || !bytes.Equal(out, append(append([]byte{}, a...), b...)) {
		t.Fatalf("at the limit: %d bytes, %v", len(out), err)
	}
	_, err = decompress(src, codecSnappy, int64(len(a)+len(b)-1))
	var re *recordError
	if !errors.As(err, &re) || re.code != kerr.MessageTooLarge.Code {
		t.Fatalf("one byte over: %v, want MESSAGE_TOO_LARGE", err)
	}
	if _, err := decompress(src[:len(src)-3], codecSnappy, 1<<20); !errors.As(err, &re) || re.code != kerr.CorruptMessage.Code {
		t.Fatalf("truncated: %v, want CORRUPT_MESSAGE", err)
	}
}

// A zstd frame that asks for a window over the bound is refused as too
// large, whether the decoder finds it opening the stream or reading it.
func TestUnzstdWindowBounded(t *testing.T) {
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithWindowSize(64<<20), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 20<<20)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = decompress(buf.Bytes(), codecZstd, MaxProduceRecordBytes)
	var re *recordError
	if !errors.As(err, &re) || re.code != kerr.MessageTooLarge.Code {
		t.Fatalf("a 64 MiB window: %v, want MESSAGE_TOO_LARGE", err)
	}
}
