package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// Durable Streams appends in the history (star/durable, docs/durable-
// streams.md). A durable client appends to a shared stream through the
// protocol's face (POST <prefix>/<stream>) of a random star, as an
// idempotent producer, beside the S2 clients of the same stream. Each
// append is one record (bytes mode) whose headers are the producer's, so
// its hash is known before the call and S2 reads see it like any record.
// An attempt that ends without an answer (a killed star, a timeout) is
// sent again with the same producer id, epoch and seq, a few times: the
// history holds one operation for all attempts, so an append the retries
// applied twice is a record no operation explains, and the checker fails.

// DurablePrefix is the path the stars serve the protocol under.
const DurablePrefix = "/ds"

// durableAttempts bounds the sends of one producer append.
const durableAttempts = 4

type durableClient struct {
	id        int
	stream    string
	endpoints []string
	h         *History
	rng       *rand.Rand
	http      *http.Client

	ops        int
	epoch, seq uint64
	producer   string
	created    bool
}

func newDurableClient(id int, stream string, endpoints []string, h *History, rng *rand.Rand) *durableClient {
	return &durableClient{id: id, stream: stream, endpoints: endpoints, h: h, rng: rng,
		http: &http.Client{Timeout: opTimeout}, producer: fmt.Sprintf("verify-d%d", id)}
}

func (c *durableClient) url() string {
	return c.endpoints[c.rng.IntN(len(c.endpoints))] + DurablePrefix + "/" + url.PathEscape(c.stream)
}

func (c *durableClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		var failed bool
		if !c.created {
			failed = !c.create(ctx)
		} else {
			failed = c.append(ctx)
		}
		if failed {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(20+c.rng.IntN(40)) * time.Millisecond):
			}
		}
	}
}

// create gives the existing starlog stream its Durable Streams face (PUT
// is idempotent: 201 or 200).
func (c *durableClient) create(ctx context.Context) bool {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(octx, http.MethodPut, c.url(), nil)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.created = resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK
	return c.created
}

// durableRecord is the record star/durable stores for a bytes-mode
// producer append (records.go: the producer headers on the first record).
func durableRecord(body []byte, producer string, epoch, seq uint64) api.Record {
	return api.Record{Body: body, Headers: []api.Header{
		{Name: []byte("ds-producer-id"), Value: []byte(producer)},
		{Name: []byte("ds-producer-epoch"), Value: strconv.AppendUint(nil, epoch, 10)},
		{Name: []byte("ds-producer-seq"), Value: strconv.AppendUint(nil, seq, 10)},
	}}
}

// errDurableIndefinite is an append whose effect is unknown: no answer,
// a 5xx, or a 204 duplicate (applied by an earlier attempt, at a seq num
// the answer does not say).
var errDurableIndefinite = errors.New("durable append: outcome unknown")

func (c *durableClient) append(ctx context.Context) (failed bool) {
	c.ops++
	body := fmt.Appendf(nil, "%s/d%d/o%d", c.stream, c.id, c.ops)
	rec := durableRecord(body, c.producer, c.epoch, c.seq)
	in := &Input{Stream: c.stream, Kind: KindAppend, Records: []uint64{RecordHash(&rec)},
		Label: fmt.Sprintf("d%d/o%d", c.id, c.ops)}
	call := c.h.Now()
	var ack api.AppendAck
	err := errDurableIndefinite
	definite, duplicate, retries := false, false, 0
	for attempt := 0; attempt < durableAttempts && ctx.Err() == nil; attempt++ {
		status, next, serr := c.send(ctx, body)
		if serr != nil || status >= 500 {
			retries++
			select { // the same seq again, shortly: applied at most once
			case <-ctx.Done():
			case <-time.After(time.Duration(20+c.rng.IntN(40)) * time.Millisecond):
			}
			continue
		}
		switch status {
		case http.StatusOK:
			ack = api.AppendAck{Start: api.StreamPosition{SeqNum: next - 1}, End: api.StreamPosition{SeqNum: next}}
			err = nil
		case http.StatusNoContent:
			err, duplicate = errDurableIndefinite, true // an earlier attempt applied it
		default:
			// 409 (a gap after an unknown outcome, an S2 fence) and the
			// like: refused before anything was appended.
			err = &api.Error{Status: status, Code: api.CodeInvalid, Message: fmt.Sprintf("durable append refused: %d", status)}
			definite = true
		}
		break
	}
	if definite {
		c.h.RecordDurableRefusal(c.id, in, call, err)
	} else {
		c.h.RecordDurableAppend(c.id, in, call, ack, err, duplicate, retries)
	}
	switch {
	case err == nil || errors.Is(err, errDurableIndefinite) && !definite:
		// Applied, or maybe: a new epoch makes the next seq 0 either way
		// when the outcome is unknown (a gap otherwise).
		if err == nil {
			c.seq++
		} else {
			c.epoch, c.seq = c.epoch+1, 0
		}
	default:
		c.epoch, c.seq = c.epoch+1, 0
	}
	return err != nil
}

// send posts one attempt; next is the Stream-Next-Offset's seq num.
func (c *durableClient) send(ctx context.Context, body []byte) (status int, next uint64, err error) {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(octx, http.MethodPost, c.url(), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	req.Header.Set("Producer-Id", c.producer)
	req.Header.Set("Producer-Epoch", strconv.FormatUint(c.epoch, 10))
	req.Header.Set("Producer-Seq", strconv.FormatUint(c.seq, 10))
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		off := resp.Header.Get("Stream-Next-Offset")
		seqPart, _, _ := strings.Cut(off, "_")
		n, perr := strconv.ParseUint(seqPart, 10, 64)
		if perr != nil || n == 0 {
			return 0, 0, fmt.Errorf("durable append: bad Stream-Next-Offset %q", off)
		}
		return resp.StatusCode, n, nil
	}
	return resp.StatusCode, 0, nil
}
