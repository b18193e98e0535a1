package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FrameError is a frame the listener will not read: its size prefix is
// negative or over the bound. The connection is closed; nothing of the
// frame was acted on.
type FrameError struct {
	Size int32
	Max  int
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("kafka: request frame of %d bytes (at most %d)", e.Size, e.Max)
}

// frameReader reads size-prefixed frames (a big-endian int32, then that
// many bytes). onSize runs once a size has arrived, before the body is
// read: the listener moves the read deadline from the idle bound to the
// I/O bound there.
type frameReader struct {
	r      io.Reader
	max    int
	onSize func()
	size   [4]byte
}

// next returns the next frame's bytes; io.EOF when the peer closed
// between frames, *FrameError for a size out of bounds.
func (f *frameReader) next() ([]byte, error) {
	if _, err := io.ReadFull(f.r, f.size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(f.size[:]))
	if n < 0 || int(n) > f.max {
		return nil, &FrameError{Size: n, Max: f.max}
	}
	if f.onSize != nil {
		f.onSize()
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(f.r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// header is a request header (v1, or v2 for flexible requests).
type header struct {
	key, version int16
	correlation  int32
	clientID     *string
}

// errBadHeader is a frame too short for a header, or of an API key kmsg
// does not know.
var errBadHeader = errors.New("kafka: malformed request header")

// parseHeader splits a request frame into its header, the request of its
// key and version (not yet decoded: req.ReadFrom(body)), and the body.
// req is nil for an API key kmsg does not know.
func parseHeader(frame []byte) (header, kmsg.Request, []byte, error) {
	if len(frame) < 8 {
		return header{}, nil, nil, errBadHeader
	}
	r := kbin.Reader{Src: frame}
	h := header{key: r.Int16(), version: r.Int16(), correlation: r.Int32()}
	req := kmsg.RequestForKey(h.key)
	if req == nil {
		return h, nil, nil, nil
	}
	req.SetVersion(h.version)
	h.clientID = r.NullableString()
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if r.Complete() != nil {
		return header{}, nil, nil, errBadHeader
	}
	return h, req, r.Src, nil
}

// appendResponse appends a response frame (size, header, body) to dst.
// ApiVersions answers with header v0 whatever its version (KIP-511), so
// a client that sent a version we do not serve can still read it.
func appendResponse(dst []byte, correlation int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = kbin.AppendInt32(dst, correlation)
	if resp.IsFlexible() && resp.Key() != 18 {
		dst = append(dst, 0) // no tagged fields
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
