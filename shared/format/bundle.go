package format

import (
	"fmt"
	"math"
	"slices"
)

// A transit bundle is one flight rendered as a slot object:
//
//	[0,60)                   envelope (kind flight)
//	[60,FooterOffset)        record blocks, one per batch, in arrival order
//	[FooterOffset,+FooterLen) bundle footer, which ends the object
//
// Bundle footer layout (little-endian):
//
//	[0,4)   magic "STLF"
//	[4]     version u8
//	[5]     reserved u8 (0)
//	[6,8)   reserved u16 (0)
//	[8,12)  stream count u32
//	[12,16) extent count u32
//	stream table, per stream in order of first use by an extent:
//	        id length u16 (1..512), id bytes
//	extents, per batch in arrival order (45 bytes + token):
//	        stream index u32 | first seq u64 | count u32 | offset u64 |
//	        length u32 | min timestamp u64 | max timestamp u64 |
//	        token length u8 (0..36) | token bytes
//	CRC-32C u32 of all preceding footer bytes
//
// Stream ids are stored once per footer: a hot stream contributes many
// batches to one flight.

// Batch is one sequenced batch of one stream: dense seqs, timestamps set.
// FencingToken is the stream's token after the batch.
type Batch struct {
	StreamID     string
	FencingToken string
	Records      []Record
}

// Extent locates one batch's block inside a bundle. Offset is object-absolute.
type Extent struct {
	StreamID                   string
	FirstSeq                   uint64
	Count                      uint32
	Offset                     uint64
	Length                     uint32
	MinTimestamp, MaxTimestamp uint64
	FencingToken               string
}

// EndSeq is one past the extent's last seq.
func (e Extent) EndSeq() uint64 { return e.FirstSeq + uint64(e.Count) }

// BlockInfo is what the extent's block header must say.
func (e Extent) BlockInfo() BlockInfo {
	return BlockInfo{FirstSeq: e.FirstSeq, Count: e.Count, MinTimestamp: e.MinTimestamp, MaxTimestamp: e.MaxTimestamp, Length: e.Length}
}

// BundleFooter indexes every extent of a bundle, in the order the batches
// were given (arrival order).
type BundleFooter struct {
	Extents []Extent
}

var bundleFooterMagic = [4]byte{'S', 'T', 'L', 'F'}

const (
	bundleFooterHeaderLen = 16
	bundleFooterMinLen    = bundleFooterHeaderLen + 4
	extentFixedLen        = 45
	streamEntryMinLen     = 3
)

// bundlePlan is the validated shape of a bundle, computed before rendering
// so the buffer is sized once.
type bundlePlan struct {
	blockSize []int
	headers   []int
	streams   []string          // table order: first use
	index     map[string]uint32 // stream id -> table index
	footerLen int
	total     int
}

func planBundle(batches []Batch) (bundlePlan, error) {
	p := bundlePlan{
		blockSize: make([]int, len(batches)),
		headers:   make([]int, len(batches)),
		index:     make(map[string]uint32),
	}
	p.footerLen = bundleFooterMinLen
	p.total = EnvelopeSize
	for i, b := range batches {
		if len(b.StreamID) == 0 || len(b.StreamID) > MaxStreamIDLen {
			return bundlePlan{}, invalidf("batch %d: stream id of %d bytes, want 1..%d", i, len(b.StreamID), MaxStreamIDLen)
		}
		if len(b.FencingToken) > MaxFencingTokenLen {
			return bundlePlan{}, invalidf("batch %d: fencing token of %d bytes, want at most %d", i, len(b.FencingToken), MaxFencingTokenLen)
		}
		size, headers, err := checkBlock(b.Records)
		if err != nil {
			return bundlePlan{}, fmt.Errorf("batch %d (stream %q): %w", i, b.StreamID, err)
		}
		p.blockSize[i], p.headers[i] = size, headers
		p.total += size
		if _, ok := p.index[b.StreamID]; !ok {
			p.index[b.StreamID] = uint32(len(p.streams))
			p.streams = append(p.streams, b.StreamID)
			p.footerLen += 2 + len(b.StreamID)
		}
		p.footerLen += extentFixedLen + len(b.FencingToken)
	}
	if uint64(p.total) > math.MaxUint32 || uint64(p.footerLen) > math.MaxUint32-uint64(p.total) {
		return bundlePlan{}, invalidf("bundle of %d+%d bytes exceeds the envelope's 32-bit footer coordinates", p.total, p.footerLen)
	}
	p.total += p.footerLen
	return p, nil
}

// EncodeBundle renders a whole flight slot object (envelope, blocks, footer)
// into one buffer sized up front.
func EncodeBundle(epoch, slot uint64, nonce Nonce, batches []Batch) ([]byte, error) {
	p, err := planBundle(batches)
	if err != nil {
		return nil, err
	}
	return appendBundle(make([]byte, 0, p.total), epoch, slot, nonce, batches, &p), nil
}

// AppendBundle is EncodeBundle appending to dst, so callers can reuse
// buffers. On error dst is returned unchanged.
func AppendBundle(dst []byte, epoch, slot uint64, nonce Nonce, batches []Batch) ([]byte, error) {
	p, err := planBundle(batches)
	if err != nil {
		return dst, err
	}
	return appendBundle(dst, epoch, slot, nonce, batches, &p), nil
}

func appendBundle(dst []byte, epoch, slot uint64, nonce Nonce, batches []Batch, p *bundlePlan) []byte {
	dst = slices.Grow(dst, p.total)
	start := len(dst)
	dst = dst[:start+EnvelopeSize] // written last, once the footer's place is known
	for i := range batches {
		dst = appendBlock(dst, batches[i].Records, p.blockSize[i], p.headers[i])
	}
	footerOff := len(dst) - start

	f := len(dst)
	dst = dst[:f+bundleFooterHeaderLen]
	copy(dst[f:f+4], bundleFooterMagic[:])
	dst[f+4] = Version
	dst[f+5] = 0
	le.PutUint16(dst[f+6:], 0)
	le.PutUint32(dst[f+8:], uint32(len(p.streams)))
	le.PutUint32(dst[f+12:], uint32(len(batches)))
	for _, s := range p.streams {
		dst = le.AppendUint16(dst, uint16(len(s)))
		dst = append(dst, s...)
	}
	off := uint64(EnvelopeSize)
	for i := range batches {
		b := &batches[i]
		recs := b.Records
		dst = le.AppendUint32(dst, p.index[b.StreamID])
		dst = le.AppendUint64(dst, recs[0].SeqNum)
		dst = le.AppendUint32(dst, uint32(len(recs)))
		dst = le.AppendUint64(dst, off)
		dst = le.AppendUint32(dst, uint32(p.blockSize[i]))
		dst = le.AppendUint64(dst, recs[0].Timestamp)
		dst = le.AppendUint64(dst, recs[len(recs)-1].Timestamp)
		dst = append(dst, byte(len(b.FencingToken)))
		dst = append(dst, b.FencingToken...)
		off += uint64(p.blockSize[i])
	}
	dst = le.AppendUint32(dst, checksum(dst[f:]))

	putEnvelope(dst[start:], Envelope{
		Kind:         KindFlight,
		Epoch:        epoch,
		Slot:         slot,
		Nonce:        nonce,
		ObjectSize:   uint64(len(dst) - start),
		FooterOffset: uint32(footerOff),
		FooterLen:    uint32(len(dst) - f),
	})
	return dst
}

// DecodeBundleFooter decodes b, the object's bytes [FooterOffset,
// FooterOffset+FooterLen). It checks the footer's CRC and that extents tile
// the block region contiguously from offset 60 in arrival order; it cannot
// see the blocks themselves (DecodeBundle cross-checks them).
func DecodeBundleFooter(b []byte) (BundleFooter, error) {
	if len(b) < bundleFooterMinLen {
		return BundleFooter{}, corruptf("bundle footer: %d bytes, need at least %d", len(b), bundleFooterMinLen)
	}
	if [4]byte(b[0:4]) != bundleFooterMagic {
		return BundleFooter{}, corruptf("bundle footer: bad magic %x", b[0:4])
	}
	if v := b[4]; v < 1 || v > MaxVersion {
		return BundleFooter{}, versionErr("bundle footer", v)
	}
	body := b[:len(b)-4]
	if want, got := checksum(body), le.Uint32(b[len(b)-4:]); want != got {
		return BundleFooter{}, corruptf("bundle footer: crc %08x, computed %08x", got, want)
	}
	if b[5] != 0 || le.Uint16(b[6:]) != 0 {
		return BundleFooter{}, corruptf("bundle footer: reserved bytes set")
	}
	nStreams, nExtents := le.Uint32(b[8:]), le.Uint32(b[12:])
	rest := uint64(len(body) - bundleFooterHeaderLen)
	if nStreams > nExtents || uint64(nStreams)*streamEntryMinLen+uint64(nExtents)*extentFixedLen > rest {
		return BundleFooter{}, corruptf("bundle footer: %d streams and %d extents cannot fit %d bytes", nStreams, nExtents, rest)
	}
	off := bundleFooterHeaderLen
	streams := make([]string, nStreams)
	seen := make(map[string]struct{}, nStreams)
	for i := range streams {
		if len(body)-off < 2 {
			return BundleFooter{}, corruptf("bundle footer: stream %d truncated", i)
		}
		n := int(le.Uint16(body[off:]))
		off += 2
		if n == 0 || n > MaxStreamIDLen || n > len(body)-off {
			return BundleFooter{}, corruptf("bundle footer: stream %d id of %d bytes", i, n)
		}
		s := string(body[off : off+n])
		off += n
		if _, dup := seen[s]; dup {
			return BundleFooter{}, corruptf("bundle footer: stream %q listed twice", s)
		}
		seen[s] = struct{}{}
		streams[i] = s
	}
	exts := make([]Extent, nExtents)
	lastToken := make([]string, nStreams) // reuse token strings: a stream's token rarely changes
	var used uint32
	end := uint64(EnvelopeSize)
	for i := range exts {
		if len(body)-off < extentFixedLen {
			return BundleFooter{}, corruptf("bundle footer: extent %d truncated", i)
		}
		e := body[off : off+extentFixedLen]
		off += extentFixedLen
		idx := le.Uint32(e[0:])
		switch {
		case idx == used && used < nStreams:
			used++
		case idx < used:
		default:
			return BundleFooter{}, corruptf("bundle footer: extent %d names stream %d out of first-use order", i, idx)
		}
		x := Extent{
			StreamID:     streams[idx],
			FirstSeq:     le.Uint64(e[4:]),
			Count:        le.Uint32(e[12:]),
			Offset:       le.Uint64(e[16:]),
			Length:       le.Uint32(e[24:]),
			MinTimestamp: le.Uint64(e[28:]),
			MaxTimestamp: le.Uint64(e[36:]),
		}
		tl := int(e[44])
		if tl > MaxFencingTokenLen || tl > len(body)-off {
			return BundleFooter{}, corruptf("bundle footer: extent %d token of %d bytes", i, tl)
		}
		if tok := body[off : off+tl]; string(tok) == lastToken[idx] {
			x.FencingToken = lastToken[idx]
		} else {
			x.FencingToken = string(tok)
			lastToken[idx] = x.FencingToken
		}
		off += tl
		if p := blockInfoProblem(x.BlockInfo()); p != "" {
			return BundleFooter{}, corruptf("bundle footer: extent %d: %s", i, p)
		}
		if x.Offset != end {
			return BundleFooter{}, corruptf("bundle footer: extent %d at offset %d, want %d", i, x.Offset, end)
		}
		end += uint64(x.Length)
		exts[i] = x
	}
	if used != nStreams {
		return BundleFooter{}, corruptf("bundle footer: %d of %d streams unused", nStreams-used, nStreams)
	}
	if off != len(body) {
		return BundleFooter{}, corruptf("bundle footer: %d trailing bytes", len(body)-off)
	}
	return BundleFooter{Extents: exts}, nil
}

// DecodeBundle decodes a whole flight object: the envelope, the footer, and
// every block's header (its own CRC) cross-checked against its extent, so the
// extents are known to tile [60, FooterOffset) with blocks that say what the
// footer says. Block payload CRCs are left to whoever reads the records
// (DecodeBlock, DecodeBlocks) so that no byte is checksummed twice on the read
// path; VerifyBundle checks them too. A poison object gives ErrPoison.
func DecodeBundle(obj []byte) (Envelope, BundleFooter, error) {
	return decodeBundle(obj, PeekBlock)
}

// VerifyBundle is DecodeBundle plus every block's payload CRC: a nil error
// means every byte of obj is as written. Use it before copying extents
// verbatim (settling) when the records are not decoded.
func VerifyBundle(obj []byte) (Envelope, BundleFooter, error) {
	return decodeBundle(obj, VerifyBlock)
}

func decodeBundle(obj []byte, check func([]byte) (BlockInfo, error)) (Envelope, BundleFooter, error) {
	env, err := DecodeEnvelope(obj)
	if err != nil {
		return Envelope{}, BundleFooter{}, err
	}
	if env.Kind == KindPoison {
		return env, BundleFooter{}, fmt.Errorf("%w: epoch %d slot %d", ErrPoison, env.Epoch, env.Slot)
	}
	if env.ObjectSize != uint64(len(obj)) {
		return Envelope{}, BundleFooter{}, corruptf("bundle: %d bytes, envelope says %d", len(obj), env.ObjectSize)
	}
	f, err := DecodeBundleFooter(obj[env.FooterOffset:])
	if err != nil {
		return Envelope{}, BundleFooter{}, err
	}
	end := uint64(EnvelopeSize)
	for i, x := range f.Extents {
		end = x.Offset + uint64(x.Length)
		if end > uint64(env.FooterOffset) {
			return Envelope{}, BundleFooter{}, corruptf("bundle: extent %d [%d,%d) overlaps footer at %d", i, x.Offset, end, env.FooterOffset)
		}
		info, err := check(obj[x.Offset:end])
		if err != nil {
			return Envelope{}, BundleFooter{}, fmt.Errorf("bundle: extent %d: %w", i, err)
		}
		if info != x.BlockInfo() {
			return Envelope{}, BundleFooter{}, corruptf("bundle: extent %d says %+v, block says %+v", i, x.BlockInfo(), info)
		}
	}
	if end != uint64(env.FooterOffset) {
		return Envelope{}, BundleFooter{}, corruptf("bundle: blocks end at %d, footer starts at %d", end, env.FooterOffset)
	}
	return env, f, nil
}
