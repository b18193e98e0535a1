package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

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
//
// A produce naming an id no star claimed (at or past the counter), or one
// of this star's block not handed out yet, is refused: checkProducerID.
// The counter only grows, so an id below it stays known: only an id past
// the value this star last saw makes it read the row again, at most once
// per producerIDRecheck, so a produce of a handed-out id never reads the
// metastore.

const (
	// ProducerIDBlock is how many ids one put of the counter row claims.
	ProducerIDBlock = 1000
	// producerIDAttempts bounds the puts of one claim that lose a race
	// with another star's.
	producerIDAttempts = 5
	// producerIDRecheck is how soon after a read of the counter an id
	// past it makes the star read it again: a client sending made-up ids
	// costs at most a read this often. An id another star claimed within
	// it is refused once, and its producer asks for a new one.
	producerIDRecheck = 100 * time.Millisecond
	// producerIDReadTimeout bounds that read.
	producerIDReadTimeout = 2 * time.Second
)

// producerIDsKey is the counter row: the first id no star has claimed.
func producerIDsKey(basin string) meta.Key { return meta.Key{PK: "kafka#" + basin, SK: "producer-ids"} }

// producerIDs is this star's claimed block [next, end), and the
// counter as this star last saw it.
type producerIDs struct {
	mu        sync.Mutex
	next, end int64
	// issued: every id below it was claimed by some star.
	issued int64
	// checked is when the counter row was last read; recheck serializes
	// those reads.
	checked time.Time
	recheck sync.Mutex
}

// errNeverIssued refuses a batch of a producer id no InitProducerId
// handed out: UNKNOWN_PRODUCER_ID, on which franz-go and librdkafka ask
// for a new id and resend (INVALID_PRODUCER_EPOCH would be fatal to
// librdkafka's idempotent producer: "fenced").
func errNeverIssued(pid int64) error {
	return &recordError{code: kerr.UnknownProducerID.Code,
		msg: fmt.Sprintf("producer id %d was not handed out by InitProducerId", pid)}
}

// knownProducerID answers from memory: issued says the id was handed
// out, sure that the answer holds.
func (p *producerIDs) knownProducerID(pid int64) (issued, sure bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case pid >= p.next && pid < p.end:
		return false, true // this star's, yet to be handed out
	case pid < p.issued:
		return true, true
	}
	return false, false
}

// checkProducerID refuses a produce of producer id pid that no star
// handed out (errNeverIssued). A counter row that cannot be read lets
// the id through: appends do not wait on the metastore, and the producer
// table still applies each batch once.
func (s *Server) checkProducerID(ctx context.Context, pid int64) error {
	p := &s.pids
	if issued, sure := p.knownProducerID(pid); sure {
		if !issued {
			return errNeverIssued(pid)
		}
		return nil
	}
	p.recheck.Lock()
	defer p.recheck.Unlock()
	if issued, sure := p.knownProducerID(pid); sure { // read meanwhile
		if !issued {
			return errNeverIssued(pid)
		}
		return nil
	}
	p.mu.Lock()
	recent := time.Since(p.checked) < s.pidRecheck
	p.mu.Unlock()
	if recent {
		return errNeverIssued(pid)
	}
	rctx, cancel := context.WithTimeout(ctx, producerIDReadTimeout)
	defer cancel()
	k := producerIDsKey(s.basin)
	it, err := s.star.Meta().Get(rctx, k.PK, k.SK)
	var counter int64
	switch {
	case err == nil:
		if counter, err = strconv.ParseInt(string(it.Val), 10, 64); err != nil {
			s.log.Warn("producer id counter unreadable: id let through", "producer_id", pid, "value", string(it.Val))
			return nil
		}
	case errors.Is(err, meta.ErrNotFound):
		// No id was ever handed out.
	default:
		s.log.Warn("producer id counter unread: id let through", "producer_id", pid, "err", err)
		return nil
	}
	p.mu.Lock()
	p.issued, p.checked = max(p.issued, counter), time.Now()
	p.mu.Unlock()
	if issued, _ := p.knownProducerID(pid); !issued {
		return errNeverIssued(pid)
	}
	return nil
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
		p.issued = max(p.issued, p.end) // the counter as claimed
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
