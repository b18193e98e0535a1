package kafka

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Topic rows change only by CreateTopics, CreatePartitions and
// DeleteTopics, so produce, fetch and ListOffsets read them from a
// cache rather than the metastore on every request.
const (
	// topicCacheTTL bounds how long a star trusts a topic row (or its
	// absence) it read: another star's CreatePartitions or DeleteTopics
	// is seen here within it (this star's own at once).
	topicCacheTTL = 2 * time.Second
	// topicCacheMax bounds the cache; when full it is emptied (a client
	// naming topics at random costs reads, never memory).
	topicCacheMax = 4096
)

type cachedTopic struct {
	row     topicRow
	missing bool
	at      time.Time
}

type topicCache struct {
	mu sync.Mutex
	m  map[string]cachedTopic
	// gen counts forgets: a read that began before one does not fill the
	// cache (it may hold what the change replaced).
	gen uint64
}

func (c *topicCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *topicCache) get(name string) (cachedTopic, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	return e, ok
}

// put caches e unless a topic was forgotten since gen.
func (c *topicCache) put(name string, e cachedTopic, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.m == nil || len(c.m) >= topicCacheMax {
		c.m = make(map[string]cachedTopic)
	}
	c.m[name] = e
}

func (c *topicCache) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, name)
	c.gen++
}

// topic is a topic's row as the data path uses it: from the cache while
// fresh, else read again. When the metastore cannot answer, the row last
// read serves however old (errNoTopic is never served stale): appends
// are acknowledged without the metastore, so a produce should be too.
func (s *Server) topic(ctx context.Context, name string) (topicRow, error) {
	e, ok := s.topics.get(name)
	if ok && time.Since(e.at) < topicCacheTTL {
		if e.missing {
			return topicRow{}, errNoTopic
		}
		return e.row, nil
	}
	gen := s.topics.generation()
	row, _, err := s.getTopic(ctx, name)
	switch {
	case err == nil:
		s.topics.put(name, cachedTopic{row: row, at: time.Now()}, gen)
		return row, nil
	case errors.Is(err, errNoTopic):
		s.topics.put(name, cachedTopic{missing: true, at: time.Now()}, gen)
		return topicRow{}, err
	case ok && !e.missing:
		s.log.Warn("kafka: serving a cached topic row; the metastore did not answer", "topic", name, "err", err)
		return e.row, nil
	}
	return topicRow{}, err
}
