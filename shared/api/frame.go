package api

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"
)

// S2S framing: [len u24 BE][flag u8][payload], len = 1 + len(payload).
const (
	// MaxFrameLen bounds len (flag byte plus payload).
	MaxFrameLen = 2 << 20
	// MaxFramePayload bounds a payload on the wire and after decompression.
	MaxFramePayload = MaxFrameLen - 1
	// CompressThreshold: payloads under 1 KiB are sent uncompressed.
	CompressThreshold = 1 << 10

	frameHeaderLen      = 4
	flagTerminal        = 0x80
	flagCompressionMask = 0x60
	flagCompressionShft = 5
	flagReconnect       = 0x10
	flagReserved        = 0x0f
)

// Frame is one decoded s2s frame. Payload is decompressed; for a terminal
// frame it is the JSON error body and Status the HTTP status.
type Frame struct {
	Terminal bool
	// ReconnectAdvised is set by a draining server: reconnect soon.
	ReconnectAdvised bool
	// Compression is the codec the payload arrived in.
	Compression Compression
	Status      int
	Payload     []byte
}

// Err is the *Error a terminal frame carries (nil for other frames).
func (f *Frame) Err() *Error {
	if !f.Terminal {
		return nil
	}
	return ParseError(f.Status, f.Payload)
}

// FrameReader reads s2s frames. It never holds more than MaxFrameLen of
// input and MaxFramePayload of decompressed output: a larger length prefix
// or a payload that decompresses past the bound fails with 400 bad_frame.
// Input is buffered as it arrives, so a frame whose header announces more
// than follows costs only the bytes sent.
type FrameReader struct {
	// Started, when set, is called once a frame's header has arrived and
	// before its payload is read: a server arms its frame-completion
	// deadline there (and disarms it when Next returns).
	Started func()
	// Keep is the largest payload buffer kept for the next frame (0:
	// 256 KiB). A client reading 1 MiB batches from its server sets it
	// to MaxFrameLen, so every frame does not regrow its buffer by
	// doublings; a server reading untrusted clients keeps the default.
	Keep int

	r    io.Reader
	hdr  [frameHeaderLen]byte
	in   []byte
	out  []byte
	gz   *gzip.Reader
	zstd *zstd.Decoder
}

// NewFrameReader reads frames from r. Close it to release its decoders.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: r}
}

// Close releases the decompressors.
func (fr *FrameReader) Close() {
	if fr.zstd != nil {
		fr.zstd.Close()
		fr.zstd = nil
	}
}

// Next reads one frame. The Payload is only valid until the next call. It
// returns io.EOF at a clean end between frames, io.ErrUnexpectedEOF inside
// one, an *Error with code bad_frame for a malformed frame, and read errors
// wrapped.
func (fr *FrameReader) Next() (Frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return Frame{}, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, err
		}
		return Frame{}, fmt.Errorf("s2s: read frame header: %w", err)
	}
	n := int(fr.hdr[0])<<16 | int(fr.hdr[1])<<8 | int(fr.hdr[2])
	if n == 0 {
		return Frame{}, BadFrame("frame length 0: the flag byte is mandatory")
	}
	if n > MaxFrameLen {
		return Frame{}, BadFrame("frame length %d exceeds %d", n, MaxFrameLen)
	}
	flag := fr.hdr[3]
	if flag&flagReserved != 0 {
		return Frame{}, BadFrame("reserved flag bits set: %#02x", flag)
	}
	f := Frame{
		Terminal:         flag&flagTerminal != 0,
		ReconnectAdvised: flag&flagReconnect != 0,
		Compression:      Compression((flag & flagCompressionMask) >> flagCompressionShft),
	}
	if f.Compression > CompressionGzip {
		return Frame{}, BadFrame("unknown compression %d", f.Compression)
	}
	if fr.Started != nil {
		fr.Started()
	}
	// The payload buffer grows with the bytes that arrive, not with what
	// the header announces: a stalled frame holds only what it sent. A
	// big buffer is not kept for the next frame either.
	if cap(fr.in) > cmp.Or(fr.Keep, frameKeep) {
		fr.in = nil
	}
	in, err := readN(fr.r, fr.in[:0], n-1)
	fr.in = in
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, io.ErrUnexpectedEOF
		}
		return Frame{}, fmt.Errorf("s2s: read frame payload: %w", err)
	}
	payload, err := fr.decompress(f.Compression, fr.in)
	if err != nil {
		return Frame{}, err
	}
	if f.Terminal {
		if len(payload) < 2 {
			return Frame{}, BadFrame("terminal frame without a status")
		}
		f.Status = int(binary.BigEndian.Uint16(payload))
		payload = payload[2:]
	}
	f.Payload = payload
	return f, nil
}

// decompress inflates p with at most MaxFramePayload bytes of output.
func (fr *FrameReader) decompress(c Compression, p []byte) ([]byte, error) {
	switch c {
	case CompressionNone:
		return p, nil
	case CompressionGzip:
		if fr.gz == nil {
			fr.gz = new(gzip.Reader)
		}
		if err := fr.gz.Reset(bytes.NewReader(p)); err != nil {
			return nil, BadFrame("gzip payload: %v", err)
		}
		out, err := readAtMost(fr.gz, fr.out[:0], MaxFramePayload)
		fr.out = out[:0]
		if err != nil {
			return nil, BadFrame("gzip payload: %v", err)
		}
		return out, nil
	case CompressionZstd:
		if fr.zstd == nil {
			d, err := zstd.NewReader(nil,
				zstd.WithDecoderConcurrency(1),
				zstd.WithDecoderMaxMemory(MaxFramePayload),
				zstd.WithDecoderMaxWindow(MaxFrameLen))
			if err != nil {
				return nil, fmt.Errorf("s2s: zstd decoder: %w", err)
			}
			fr.zstd = d
		}
		// The decoder enforces MaxFramePayload block by block, so a bomb
		// fails after at most one block past the bound.
		out, err := fr.zstd.DecodeAll(p, fr.out[:0])
		fr.out = out[:0]
		if err != nil {
			return nil, BadFrame("zstd payload: %v", err)
		}
		if len(out) > MaxFramePayload {
			return nil, BadFrame("decompressed payload exceeds %d bytes", MaxFramePayload)
		}
		return out, nil
	}
	return nil, BadFrame("unknown compression %d", c)
}

// Payload buffering: a frame's buffer grows by at least frameChunk at a
// time (doubling), and one bigger than frameKeep is dropped after use.
const (
	frameChunk = 32 << 10
	frameKeep  = 256 << 10
)

// readN reads exactly n bytes from r into dst (from its length), growing
// it only as bytes arrive.
func readN(r io.Reader, dst []byte, n int) ([]byte, error) {
	for len(dst) < n {
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, min(max(cap(dst), frameChunk), n-len(dst)))
		}
		m, err := r.Read(dst[len(dst):min(cap(dst), n)])
		dst = dst[:len(dst)+m]
		if err != nil && len(dst) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return dst, err
		}
	}
	return dst, nil
}

// readAtMost reads r to the end into dst, failing past limit bytes.
func readAtMost(r io.Reader, dst []byte, limit int) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, min(max(cap(dst), 4096), limit+1-len(dst)))
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return dst, fmt.Errorf("decompressed payload exceeds %d bytes", limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// FrameWriter writes s2s frames, compressing payloads of at least
// CompressThreshold bytes with its codec (negotiated from Accept-Encoding
// on the server, chosen by the client on requests). Each frame goes out in
// one Write; flushing is the caller's business.
type FrameWriter struct {
	w         io.Writer
	c         Compression
	reconnect bool
	hdr       [frameHeaderLen]byte
	buf       []byte
	zbuf      bytes.Buffer
	zout      []byte
	gz        *gzip.Writer
	zstd      *zstd.Encoder
}

// NewFrameWriter writes frames to w, compressing with c.
func NewFrameWriter(w io.Writer, c Compression) *FrameWriter {
	return &FrameWriter{w: w, c: c}
}

// SetReconnectAdvised sets the reconnect-advised bit on later data frames,
// for a draining server.
func (fw *FrameWriter) SetReconnectAdvised(v bool) { fw.reconnect = v }

// Close releases the compressors.
func (fw *FrameWriter) Close() {
	if fw.zstd != nil {
		_ = fw.zstd.Close()
		fw.zstd = nil
	}
}

// WriteProto marshals m and writes it as a data frame.
func (fw *FrameWriter) WriteProto(m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("s2s: marshal %T: %w", m, err)
	}
	return fw.WriteMessage(b)
}

// WriteMessage writes payload (an encoded protobuf message) as a data
// frame, compressed when it is at least CompressThreshold bytes and
// compression shrinks it.
func (fw *FrameWriter) WriteMessage(payload []byte) error {
	if len(payload) > MaxFramePayload {
		return fmt.Errorf("s2s: payload of %d bytes exceeds %d", len(payload), MaxFramePayload)
	}
	c, body := CompressionNone, payload
	if fw.c != CompressionNone && len(payload) >= CompressThreshold {
		z, err := fw.compress(payload)
		if err != nil {
			return err
		}
		if len(z) < len(payload) {
			c, body = fw.c, z
		}
	}
	flag := byte(c) << flagCompressionShft
	if fw.reconnect {
		flag |= flagReconnect
	}
	if len(body) >= directWrite {
		// A big payload (a catch-up batch) goes out as it is, after its
		// header: copying it into a frame buffer would cost a copy and,
		// past the kept buffer size, an allocation per frame.
		n := 1 + len(body)
		fw.hdr = [frameHeaderLen]byte{byte(n >> 16), byte(n >> 8), byte(n), flag}
		if _, err := fw.w.Write(fw.hdr[:]); err != nil {
			return fmt.Errorf("s2s: write frame: %w", err)
		}
		if _, err := fw.w.Write(body); err != nil {
			return fmt.Errorf("s2s: write frame: %w", err)
		}
		return nil
	}
	fw.buf = AppendFrame(fw.buf[:0], flag, body)
	return fw.write()
}

// directWrite is the payload size from which WriteMessage writes the
// payload in place rather than copying it behind the header.
const directWrite = 64 << 10

// WriteTerminal writes the terminal frame of e: its status as u16 BE, then
// its JSON body, uncompressed.
func (fw *FrameWriter) WriteTerminal(e *Error) error {
	body := binary.BigEndian.AppendUint16(make([]byte, 0, 64), uint16(e.Status))
	body = append(body, e.JSON()...)
	if len(body) > MaxFramePayload {
		return fmt.Errorf("s2s: terminal payload of %d bytes exceeds %d", len(body), MaxFramePayload)
	}
	fw.buf = AppendFrame(fw.buf[:0], flagTerminal, body)
	return fw.write()
}

func (fw *FrameWriter) write() error {
	_, err := fw.w.Write(fw.buf)
	if cap(fw.buf) > 256<<10 {
		fw.buf = nil
	}
	if err != nil {
		return fmt.Errorf("s2s: write frame: %w", err)
	}
	return nil
}

func (fw *FrameWriter) compress(p []byte) ([]byte, error) {
	switch fw.c {
	case CompressionGzip:
		fw.zbuf.Reset()
		if fw.gz == nil {
			fw.gz = gzip.NewWriter(&fw.zbuf)
		} else {
			fw.gz.Reset(&fw.zbuf)
		}
		if _, err := fw.gz.Write(p); err != nil {
			return nil, fmt.Errorf("s2s: gzip: %w", err)
		}
		if err := fw.gz.Close(); err != nil {
			return nil, fmt.Errorf("s2s: gzip: %w", err)
		}
		return fw.zbuf.Bytes(), nil
	case CompressionZstd:
		if fw.zstd == nil {
			e, err := zstd.NewWriter(nil,
				zstd.WithEncoderConcurrency(1),
				zstd.WithEncoderLevel(zstd.SpeedFastest),
				zstd.WithWindowSize(MaxFrameLen),
				zstd.WithLowerEncoderMem(true))
			if err != nil {
				return nil, fmt.Errorf("s2s: zstd encoder: %w", err)
			}
			fw.zstd = e
		}
		fw.zout = fw.zstd.EncodeAll(p, fw.zout[:0])
		return fw.zout, nil
	}
	return nil, fmt.Errorf("s2s: unknown compression %d", fw.c)
}

// AppendFrame appends one frame with the given flag byte and payload (which
// must be at most MaxFramePayload bytes).
func AppendFrame(dst []byte, flag byte, payload []byte) []byte {
	n := 1 + len(payload)
	dst = append(dst, byte(n>>16), byte(n>>8), byte(n), flag)
	return append(dst, payload...)
}
