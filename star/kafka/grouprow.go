package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/starlog/starlog/shared/meta"
)

// A group's committed offsets are one metastore row of the face's own,
// beside the topic rows: kafka#<basin> / g#<group> (docs/kafka.md,
// "Durability"). A commit replaces offsets, it does not add to a log, so
// a row holds exactly what OffsetFetch answers, and a coordinator that
// takes over reads one row instead of replaying a stream. Each
// OffsetCommit is one conditional put of the row (IfVer the version this
// star last wrote or read), answered only once the put has succeeded.

const (
	// MaxGroupRowBytes bounds a group's row (DynamoDB's item limit is
	// 400 KB): a commit that would make it larger is refused with
	// INVALID_COMMIT_OFFSET_SIZE, nothing of it stored.
	MaxGroupRowBytes = 256 << 10
	// MaxOffsetMetadata bounds one committed offset's metadata string
	// (Kafka's offset.metadata.max.bytes); a longer one is
	// OFFSET_METADATA_TOO_LARGE.
	MaxOffsetMetadata = 4096
	// commitAttempts bounds the reads and puts of one commit when another
	// writer moved the row meanwhile.
	commitAttempts = 3
	// MaxGroupIDLen bounds a group id (it names the group's stream and
	// row).
	MaxGroupIDLen = 249
)

func groupKey(basin, group string) meta.Key { return meta.Key{PK: "kafka#" + basin, SK: "g#" + group} }

// committed is one partition's committed offset.
type committed struct {
	Offset int64  `json:"o"`
	Epoch  int32  `json:"e"`
	Meta   string `json:"m,omitempty"`
}

// groupRow is a group's committed offsets: topic → partition → offset.
type groupRow struct {
	Topics map[string]map[int32]committed `json:"topics"`
}

func (r groupRow) clone() groupRow {
	out := groupRow{Topics: make(map[string]map[int32]committed, len(r.Topics))}
	for t, ps := range r.Topics {
		out.Topics[t] = maps.Clone(ps)
	}
	return out
}

// errRowTooLarge refuses a commit that would pass MaxGroupRowBytes.
var errRowTooLarge = errors.New("kafka: the group's committed offsets would pass the row's bound")

// offsetRows caches each group's row as this star last wrote or read it,
// so a commit costs one put; a put that finds the row moved (another
// star, or a coordinator before this one) reads it again.
type offsetRows struct {
	mu sync.Mutex
	m  map[string]*cachedRow
}

type cachedRow struct {
	mu  sync.Mutex // serializes this star's commits of the group
	ok  bool
	row groupRow
	ver int64 // 0: the row does not exist
}

func (o *offsetRows) get(group string) *cachedRow {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]*cachedRow{}
	}
	c := o.m[group]
	if c == nil {
		if len(o.m) >= topicCacheMax {
			clear(o.m) // a bound on memory; rows are read again
		}
		c = &cachedRow{}
		o.m[group] = c
	}
	return c
}

func (o *offsetRows) forget(group string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, group)
}

// readGroupRow reads a group's row: its version, 0 when there is none.
func (s *Server) readGroupRow(ctx context.Context, group string) (groupRow, int64, error) {
	k := groupKey(s.basin, group)
	it, err := s.star.Meta().Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return groupRow{Topics: map[string]map[int32]committed{}}, 0, nil
	}
	if err != nil {
		return groupRow{}, 0, &metaError{fmt.Errorf("kafka: read group %s: %w", group, err)}
	}
	var row groupRow
	if err := json.Unmarshal(it.Val, &row); err != nil {
		return groupRow{}, 0, fmt.Errorf("kafka: decode group %s: %w", group, err)
	}
	if row.Topics == nil {
		row.Topics = map[string]map[int32]committed{}
	}
	return row, it.Ver, nil
}

// commitOffsets applies set to the group's row and writes it with one
// conditional put; it returns once the put has succeeded (the commit is
// durable then) or with the error that kept it from doing so.
func (s *Server) commitOffsets(ctx context.Context, group string, set map[string]map[int32]committed) error {
	c := s.offsets.get(group)
	c.mu.Lock()
	defer c.mu.Unlock()
	k := groupKey(s.basin, group)
	for range commitAttempts {
		if !c.ok {
			row, ver, err := s.readGroupRow(ctx, group)
			if err != nil {
				return err
			}
			c.row, c.ver, c.ok = row, ver, true
		}
		next := c.row.clone()
		for t, ps := range set {
			if next.Topics[t] == nil {
				next.Topics[t] = map[int32]committed{}
			}
			maps.Copy(next.Topics[t], ps)
		}
		val, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if len(val) > MaxGroupRowBytes {
			return errRowTooLarge
		}
		cond := meta.IfAbsent()
		if c.ver != 0 {
			cond = meta.IfVer(c.ver)
		}
		ver, err := s.star.Meta().Put(ctx, k.PK, k.SK, val, cond)
		if errors.Is(err, meta.ErrConditionFailed) {
			c.ok = false // moved by another writer: read it again
			continue
		}
		if err != nil {
			c.ok = false // the put's outcome is unknown
			return &metaError{fmt.Errorf("kafka: commit offsets of group %s: %w", group, err)}
		}
		c.row, c.ver = next, ver
		return nil
	}
	return &metaError{fmt.Errorf("kafka: commit offsets of group %s: the row kept moving", group)}
}

// deleteGroupRow deletes a group's committed offsets.
func (s *Server) deleteGroupRow(ctx context.Context, group string) error {
	c := s.offsets.get(group)
	c.mu.Lock()
	defer c.mu.Unlock()
	defer s.offsets.forget(group)
	k := groupKey(s.basin, group)
	err := s.star.Meta().Delete(ctx, k.PK, k.SK, meta.Always())
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return &metaError{fmt.Errorf("kafka: delete group %s: %w", group, err)}
	}
	return nil
}

// listGroupRows names the groups that have committed offsets.
func (s *Server) listGroupRows(ctx context.Context) ([]string, error) {
	q := meta.Query{PK: "kafka#" + s.basin, From: "g#", To: "g$", Limit: 256}
	var out []string
	for range maxListPages {
		pg, err := s.star.Meta().Query(ctx, q)
		if err != nil {
			return nil, &metaError{fmt.Errorf("kafka: list groups: %w", err)}
		}
		for _, it := range pg.Items {
			out = append(out, it.SK[len("g#"):])
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
	return out, errors.New("kafka: list groups: too many pages")
}
