package format

import (
	"bytes"
	"errors"
	"testing"

	"pgregory.net/rapid"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := Envelope{
			Epoch: rapid.Uint64().Draw(t, "epoch"),
			Slot:  rapid.Uint64().Draw(t, "slot"),
			Nonce: genNonce(t),
		}
		if rapid.Bool().Draw(t, "poison") {
			e.Kind, e.ObjectSize = KindPoison, EnvelopeSize
		} else {
			e.Kind = KindFlight
			e.FooterOffset = rapid.Uint32Min(EnvelopeSize).Draw(t, "footerOffset")
			e.FooterLen = rapid.Uint32Min(bundleFooterMinLen).Draw(t, "footerLen")
			e.ObjectSize = uint64(e.FooterOffset) + uint64(e.FooterLen)
		}
		b := e.Marshal()
		got, err := DecodeEnvelope(append(b[:], rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "rest")...))
		if err != nil {
			t.Fatalf("DecodeEnvelope: %v", err)
		}
		if got != e {
			t.Fatalf("got %+v, want %+v", got, e)
		}
	})
}

func TestEncodePoison(t *testing.T) {
	p := EncodePoison(3, 99, sampleNonce)
	if len(p) != EnvelopeSize {
		t.Fatalf("poison is %d bytes", len(p))
	}
	e, err := DecodeEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	want := Envelope{Kind: KindPoison, Epoch: 3, Slot: 99, Nonce: sampleNonce, ObjectSize: EnvelopeSize}
	if e != want {
		t.Fatalf("got %+v, want %+v", e, want)
	}
	if _, _, err := DecodeBundle(p); !errors.Is(err, ErrPoison) {
		t.Fatalf("DecodeBundle(poison) = %v, want ErrPoison", err)
	}
}

func TestEnvelopeRejects(t *testing.T) {
	flight := sampleBundle(t)[:EnvelopeSize]
	poison := EncodePoison(1, 2, sampleNonce)
	type mut struct {
		base   []byte
		f      func(b []byte)
		reseal bool
		want   error
	}
	cases := map[string]mut{
		"bad crc":            {flight, func(b []byte) { b[envOffEpoch] ^= 1 }, false, ErrCorrupt},
		"bad magic":          {flight, func(b []byte) { b[0] = 'X' }, true, ErrCorrupt},
		"version 0":          {flight, func(b []byte) { b[envOffVersion] = 0 }, true, ErrVersion},
		"version 2":          {flight, func(b []byte) { b[envOffVersion] = 2 }, false, ErrVersion},
		"reserved":           {flight, func(b []byte) { b[envOffReserved+1] = 1 }, true, ErrCorrupt},
		"kind 0":             {flight, func(b []byte) { b[envOffKind] = 0 }, true, ErrCorrupt},
		"kind 3":             {flight, func(b []byte) { b[envOffKind] = 3 }, true, ErrCorrupt},
		"flight as poison":   {flight, func(b []byte) { b[envOffKind] = byte(KindPoison) }, true, ErrCorrupt},
		"poison as flight":   {poison, func(b []byte) { b[envOffKind] = byte(KindFlight) }, true, ErrCorrupt},
		"size mismatch":      {flight, func(b []byte) { le.PutUint64(b[envOffSize:], le.Uint64(b[envOffSize:])+1) }, true, ErrCorrupt},
		"footer in envelope": {flight, func(b []byte) { le.PutUint32(b[envOffFooter:], 59) }, true, ErrCorrupt},
		"footer too short":   {flight, func(b []byte) { le.PutUint32(b[envOffFootLen:], bundleFooterMinLen-1) }, true, ErrCorrupt},
		"poison with size":   {poison, func(b []byte) { le.PutUint64(b[envOffSize:], 61) }, true, ErrCorrupt},
		"poison with footer": {poison, func(b []byte) { le.PutUint32(b[envOffFootLen:], 1) }, true, ErrCorrupt},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b := bytes.Clone(c.base)
			c.f(b)
			if c.reseal {
				b = resealEnvelope(b)
			}
			if _, err := DecodeEnvelope(b); !errors.Is(err, c.want) {
				t.Fatalf("DecodeEnvelope = %v, want %v", err, c.want)
			}
		})
	}
	for n := range EnvelopeSize {
		if _, err := DecodeEnvelope(flight[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	for i := range EnvelopeSize {
		b := bytes.Clone(poison)
		b[i] ^= 0xff
		if _, err := DecodeEnvelope(b); err == nil {
			t.Fatalf("poison byte %d flipped: accepted", i)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindFlight: "flight", KindPoison: "poison", 0: "unknown", 9: "unknown"} {
		if k.String() != want {
			t.Errorf("Kind(%d) = %q", k, k.String())
		}
	}
}
