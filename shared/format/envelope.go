package format

import "fmt"

// EnvelopeSize is the size of the envelope at offset 0 of every slot object.
// One GET of bytes [0, EnvelopeSize) classifies a slot and locates its footer.
const EnvelopeSize = 60

// Kind says what a slot object holds.
type Kind uint8

const (
	// KindFlight is a transit bundle written by the epoch's writer.
	KindFlight Kind = 1
	// KindPoison is an envelope-only object written by a fencer to kill a slot.
	KindPoison Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindFlight:
		return "flight"
	case KindPoison:
		return "poison"
	default:
		return "unknown"
	}
}

// Nonce is the writer's 128-bit per-epoch nonce. A writer whose PUT ended
// indefinitely reads the envelope back: its own nonce means its flight won.
type Nonce [16]byte

// Envelope is the decoded slot envelope.
//
// Layout (little-endian, 60 bytes): magic "STLE" | version u8 | kind u8 |
// reserved u16 (0) | epoch u64 | slot u64 | nonce [16]byte | object size u64 |
// footer offset u32 | footer length u32 | CRC-32C u32 over bytes [0,56).
type Envelope struct {
	Kind         Kind
	Epoch, Slot  uint64
	Nonce        Nonce
	ObjectSize   uint64
	FooterOffset uint32
	FooterLen    uint32
}

var envelopeMagic = [4]byte{'S', 'T', 'L', 'E'}

const (
	envOffVersion  = 4
	envOffKind     = 5
	envOffReserved = 6
	envOffEpoch    = 8
	envOffSlot     = 16
	envOffNonce    = 24
	envOffSize     = 40
	envOffFooter   = 48
	envOffFootLen  = 52
	envOffCRC      = 56
)

// Marshal renders the envelope. It does not validate; DecodeEnvelope does.
func (e Envelope) Marshal() [EnvelopeSize]byte {
	var b [EnvelopeSize]byte
	putEnvelope(b[:], e)
	return b
}

func putEnvelope(b []byte, e Envelope) {
	_ = b[EnvelopeSize-1]
	copy(b[0:4], envelopeMagic[:])
	b[envOffVersion] = Version
	b[envOffKind] = byte(e.Kind)
	le.PutUint16(b[envOffReserved:], 0)
	le.PutUint64(b[envOffEpoch:], e.Epoch)
	le.PutUint64(b[envOffSlot:], e.Slot)
	copy(b[envOffNonce:envOffNonce+16], e.Nonce[:])
	le.PutUint64(b[envOffSize:], e.ObjectSize)
	le.PutUint32(b[envOffFooter:], e.FooterOffset)
	le.PutUint32(b[envOffFootLen:], e.FooterLen)
	le.PutUint32(b[envOffCRC:], checksum(b[:envOffCRC]))
}

// DecodeEnvelope decodes the envelope in b[:EnvelopeSize] (b may be longer,
// e.g. a whole object). It checks the magic, the version, the CRC, the kind,
// the reserved bits and the footer coordinates: a flight's footer lies after
// the envelope and ends the object; a poison is exactly the envelope.
func DecodeEnvelope(b []byte) (Envelope, error) { return DecodeEnvelopeUpTo(b, MaxVersion) }

// DecodeEnvelopeUpTo is DecodeEnvelope for a reader of versions 1 to max.
// Every version this package knows has version 1's envelope layout, so a
// max above MaxVersion makes a caller act as a newer build would: the chain
// tests run an older and a newer build on one chain that way.
func DecodeEnvelopeUpTo(b []byte, max uint8) (Envelope, error) {
	if len(b) < EnvelopeSize {
		return Envelope{}, corruptf("envelope: %d bytes, need %d", len(b), EnvelopeSize)
	}
	b = b[:EnvelopeSize]
	if [4]byte(b[0:4]) != envelopeMagic {
		return Envelope{}, corruptf("envelope: bad magic %x", b[0:4])
	}
	if v := b[envOffVersion]; v < 1 || v > max {
		return Envelope{}, fmt.Errorf("%w: envelope version %d, this reader reads 1 to %d", ErrVersion, v, max)
	}
	if want, got := checksum(b[:envOffCRC]), le.Uint32(b[envOffCRC:]); want != got {
		return Envelope{}, corruptf("envelope: crc %08x, computed %08x", got, want)
	}
	if r := le.Uint16(b[envOffReserved:]); r != 0 {
		return Envelope{}, corruptf("envelope: reserved bits %04x set", r)
	}
	e := Envelope{
		Kind:         Kind(b[envOffKind]),
		Epoch:        le.Uint64(b[envOffEpoch:]),
		Slot:         le.Uint64(b[envOffSlot:]),
		Nonce:        Nonce(b[envOffNonce : envOffNonce+16]),
		ObjectSize:   le.Uint64(b[envOffSize:]),
		FooterOffset: le.Uint32(b[envOffFooter:]),
		FooterLen:    le.Uint32(b[envOffFootLen:]),
	}
	switch e.Kind {
	case KindFlight:
		if e.FooterOffset < EnvelopeSize || e.FooterLen < bundleFooterMinLen {
			return Envelope{}, corruptf("envelope: footer [%d,+%d) impossible", e.FooterOffset, e.FooterLen)
		}
		if uint64(e.FooterOffset)+uint64(e.FooterLen) != e.ObjectSize {
			return Envelope{}, corruptf("envelope: footer [%d,+%d) does not end object of %d bytes",
				e.FooterOffset, e.FooterLen, e.ObjectSize)
		}
	case KindPoison:
		if e.ObjectSize != EnvelopeSize || e.FooterOffset != 0 || e.FooterLen != 0 {
			return Envelope{}, corruptf("envelope: poison with size %d, footer [%d,+%d)",
				e.ObjectSize, e.FooterOffset, e.FooterLen)
		}
	default:
		return Envelope{}, corruptf("envelope: unknown kind %d", e.Kind)
	}
	return e, nil
}

// EncodePoison returns a whole poison object: the envelope alone, ObjectSize
// 60, no footer.
func EncodePoison(epoch, slot uint64, nonce Nonce) []byte {
	b := make([]byte, EnvelopeSize)
	putEnvelope(b, Envelope{Kind: KindPoison, Epoch: epoch, Slot: slot, Nonce: nonce, ObjectSize: EnvelopeSize})
	return b
}
