package chain

import (
	"context"
	"errors"
	"fmt"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/objstore"
)

// copyID names the writer's copy a reader looks for at one slot key: the
// epoch and slot of the key and the nonce minted onto the epoch.
type copyID struct {
	epoch, slot uint64
	nonce       format.Nonce
}

// classify says what one bucket's answer to a read of a slot's envelope
// shows the reader looking for want, a reader of envelope versions 1 to
// max. A missing key is (Unknown, nil): absent now, never permanently. A
// failed read is (Unknown, err). Otherwise the occupant: Flight for the
// writer's copy; Poison for any well-formed envelope that is not it (a
// fencer's poison, or a copy of another slot or writer: create-once keys
// mean the writer's copy can never stand there); Unreadable when the
// envelope does not decode (a flipped bit, a CRC mismatch, a version this
// reader does not know), which may be the writer's copy or not.
func classify(raw []byte, err error, want copyID, max uint8) (Occupant, error) {
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return Unknown, nil
	case err != nil:
		return Unknown, err
	}
	env, derr := format.DecodeEnvelopeUpTo(raw, max)
	if derr != nil {
		return Unreadable, nil
	}
	if env.Kind == format.KindFlight && env.Epoch == want.epoch && env.Slot == want.slot && env.Nonce == want.nonce {
		return Flight, nil
	}
	return Poison, nil
}

// readVersion is the newest envelope version this actor reads.
func (c *Chain) readVersion() uint8 {
	if c.ReadVersion != 0 {
		return c.ReadVersion
	}
	return format.MaxVersion
}

// probe reads a slot's envelope in one bucket and classifies it.
func (c *Chain) probe(ctx context.Context, b objstore.Bucket, key string, want copyID) (Occupant, error) {
	actx, cancel := c.attempt(ctx)
	defer cancel()
	head, err := b.Get(actx, key, 0, format.EnvelopeSize)
	occ, err := classify(head, err, want, c.readVersion())
	if err != nil {
		return occ, fmt.Errorf("chain: probe %s/%s: %w", b.Name(), key, err)
	}
	return occ, nil
}
