package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/meta"
)

// InitProducerId: the producer ids of idempotent producers (docs/kafka.md
// "Idempotent producers"). An id must never be handed to two producers
// that write one partition while the star remembers either (an hour idle,
// star/producer), across stars and restarts: ids come from a counter row
// of the face's, kafka#<basin> / producer-ids, which a star moves up by a
// block with one conditional put and then hands out from memory, as
// Kafka's own brokers take blocks of ids. A star that dies drops the rest
// of its block: ids are unique, not dense.

const (
	// ProducerIDBlock is how many ids one put of the counter row claims.
	ProducerIDBlock = 1000
	// producerIDAttempts bounds the puts of one claim that lose a race
	// with another star's.
	producerIDAttempts = 5
)

// producerIDsKey is the counter row: the first id no star has claimed.
func producerIDsKey(basin string) meta.Key { return meta.Key{PK: "kafka#" + basin, SK: "producer-ids"} }

// producerIDs is this star's claimed block [next, end).
type producerIDs struct {
	mu        sync.Mutex
	next, end int64
}

// newProducerID hands out an id no other producer has had.
func (s *Server) newProducerID(ctx context.Context) (int64, error) {
	p := &s.pids
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next == p.end {
		first, err := s.claimProducerIDs(ctx)
		if err != nil {
			return 0, err
		}
		p.next, p.end = first, first+ProducerIDBlock
	}
	id := p.next
	p.next++
	return id, nil
}

// claimProducerIDs moves the counter row up by a block and returns the
// block's first id.
func (s *Server) claimProducerIDs(ctx context.Context) (int64, error) {
	k := producerIDsKey(s.basin)
	ms := s.star.Meta()
	for range producerIDAttempts {
		first, cond := int64(0), meta.IfAbsent()
		it, err := ms.Get(ctx, k.PK, k.SK)
		switch {
		case err == nil:
			if first, err = strconv.ParseInt(string(it.Val), 10, 64); err != nil || first < 0 {
				return 0, fmt.Errorf("kafka: the producer id counter holds %q", it.Val)
			}
			cond = meta.IfVer(it.Ver)
		case !errors.Is(err, meta.ErrNotFound):
			return 0, &metaError{fmt.Errorf("kafka: read the producer id counter: %w", err)}
		}
		_, err = ms.Put(ctx, k.PK, k.SK, strconv.AppendInt(nil, first+ProducerIDBlock, 10), cond)
		if errors.Is(err, meta.ErrConditionFailed) {
			continue // another star claimed a block meanwhile
		}
		if err != nil {
			// Unknown outcome: the block may be claimed; it is skipped.
			return 0, &metaError{fmt.Errorf("kafka: claim producer ids: %w", err)}
		}
		return first, nil
	}
	return 0, &metaError{errors.New("kafka: claim producer ids: the counter kept moving")}
}

// initProducerID answers InitProducerId. Without a transactional id it
// hands out a new producer id at epoch 0, whatever id and epoch the
// request names (KIP-360's), as Kafka does for an idempotent producer;
// a transactional id is refused as every transaction request is.
func (cs *conn) initProducerID(ctx context.Context, r *kmsg.InitProducerIDRequest) kmsg.Response {
	if r.TransactionalID != nil {
		return unsupported(r)
	}
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	id, err := cs.s.newProducerID(ctx)
	if err != nil {
		cs.s.log.Warn("InitProducerId: no producer id", "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code // retried by clients
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}
