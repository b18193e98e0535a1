package assemble

// piece is a contiguous run of an object's bytes from one source: the
// tail's blocks, one slot ref's blocks, or the footer. Copyable pieces
// live in object storage and may be copied server-side.
type piece struct {
	n        int64
	copyable bool
}

// seg is bytes [off, off+n) of piece i.
type seg struct {
	piece  int
	off, n int64
}

// part is one part of a multipart upload: a server-side copy of one
// segment of a copyable piece, or an upload of segments concatenated.
type part struct {
	copy bool
	segs []seg
}

func (p part) size() int64 {
	var n int64
	for _, s := range p.segs {
		n += s.n
	}
	return n
}

// planParts lays an object's pieces out as multipart parts: copyable runs
// of at least minPart bytes are copied server-side; smaller pieces are
// coalesced into uploaded parts of at least minPart (topping the pending
// upload up from the head of a large piece when the rest stays copyable),
// and the last part takes whatever is left (the footer, at least). Every
// part but the last is at least minPart; the segments cover every piece's
// bytes once, in order. An uploaded part stays below 3·minPart. Pure.
func planParts(pieces []piece, minPart int64) []part {
	var parts []part
	var buf []seg
	var bufN int64
	flush := func() {
		if bufN > 0 {
			parts = append(parts, part{segs: buf})
			buf, bufN = nil, 0
		}
	}
	for i, p := range pieces {
		off, n := int64(0), p.n
		if n <= 0 {
			continue
		}
		if p.copyable {
			if bufN > 0 {
				if need := minPart - bufN; n-need >= minPart {
					buf = append(buf, seg{piece: i, off: 0, n: need})
					bufN += need
					flush()
					off, n = need, n-need
				}
			}
			if bufN == 0 && n >= minPart {
				parts = append(parts, part{copy: true, segs: []seg{{piece: i, off: off, n: n}}})
				continue
			}
		}
		buf = append(buf, seg{piece: i, off: off, n: n})
		bufN += n
		if bufN >= minPart {
			flush()
		}
	}
	flush()
	return parts
}
