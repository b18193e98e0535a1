package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kerr"
)

// MaxProduceRecordBytes bounds the record bytes of one produce request
// once decompressed, summed over its partitions' batches (so each batch
// too): what an uncompressed request could carry in one frame. A
// compressed produce then holds no more records in the star's memory
// than an uncompressed one, whatever its ratio; a client that needs more
// sends more requests, as it would uncompressed.
const MaxProduceRecordBytes = MaxFrameBytes

// Kafka's codecs, the batch attribute's low three bits.
const (
	codecNone, codecGzip, codecSnappy, codecLz4, codecZstd = 0, 1, 2, 3, 4
)

// xerialMagic starts the snappy framing of Kafka's Java client: 8 magic
// bytes, then two versions, then blocks, each a big-endian length and a
// raw snappy block.
var xerialMagic = []byte{130, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialHeaderLen = 16

// tooLarge is the refusal of a produce over MaxProduceRecordBytes.
func tooLarge(limit int64) *recordError {
	return &recordError{code: kerr.MessageTooLarge.Code,
		msg: fmt.Sprintf("the records decompress to more than the %d bytes left of a produce request's %d", limit, MaxProduceRecordBytes)}
}

// decompress returns a batch's records decompressed, at most limit
// bytes: each codec's reader is read through a limit of limit+1 bytes,
// so a batch that expands past it is refused once that many bytes are
// out, never decompressed whole.
func decompress(src []byte, codec int16, limit int64) ([]byte, error) {
	var r io.Reader
	switch codec {
	case codecNone:
		if int64(len(src)) > limit {
			return nil, tooLarge(limit)
		}
		return src, nil
	case codecSnappy:
		return unsnappy(src, limit)
	case codecGzip:
		gr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, corrupt("gzip: %v", err)
		}
		defer gr.Close()
		r = gr
	case codecLz4:
		r = lz4.NewReader(bytes.NewReader(src))
	case codecZstd:
		// The window and the decoder's memory are bounded too: a frame
		// may not ask for a window larger than what it may produce.
		zr, err := zstd.NewReader(bytes.NewReader(src), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(MaxProduceRecordBytes), zstd.WithDecoderMaxMemory(MaxProduceRecordBytes))
		if err != nil { // it may read the first frame's header
			return nil, decompressErr(err, limit)
		}
		defer zr.Close()
		r = zr
	default:
		return nil, corrupt("unknown compression codec %d", codec)
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, decompressErr(err, limit)
	}
	if int64(len(out)) > limit {
		return nil, tooLarge(limit)
	}
	return out, nil
}

// decompressErr classifies a codec's failure: over zstd's bounds is too
// large, anything else a corrupt batch.
func decompressErr(err error, limit int64) error {
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return tooLarge(limit)
	}
	return corrupt("decompression: %v", err)
}

// unsnappy decodes a raw snappy block, or the xerial framing of blocks.
// A raw block has no stream reader: its decoded length, in its header,
// is checked against limit before s2 allocates it.
func unsnappy(src []byte, limit int64) ([]byte, error) {
	if len(src) <= xerialHeaderLen || !bytes.HasPrefix(src, xerialMagic) {
		return appendSnappyBlock(nil, src, limit)
	}
	var out []byte
	for rest := src[xerialHeaderLen:]; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, corrupt("snappy: xerial block length truncated")
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, corrupt("snappy: xerial block of %d bytes in %d", n, len(rest))
		}
		var err error
		if out, err = appendSnappyBlock(out, rest[:n], limit); err != nil {
			return nil, err
		}
		rest = rest[n:]
	}
	return out, nil
}

// appendSnappyBlock appends one raw snappy block to out, refusing it
// when out would pass limit bytes.
func appendSnappyBlock(out, block []byte, limit int64) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, corrupt("snappy: %v", err)
	}
	if int64(len(out))+int64(n) > limit {
		return nil, tooLarge(limit)
	}
	dec, err := s2.Decode(nil, block)
	if err != nil {
		return nil, corrupt("snappy: %v", err)
	}
	return append(out, dec...), nil
}
