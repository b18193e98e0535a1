package catalog

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// The row check's judgment (the loop that runs it is the node's): a star
// re-reads the basin and stream rows of every stream it leads and stops
// leading a stream that was deleted or replaced, or whose basin was
// deleted or replaced, by a request served elsewhere. A read that fails
// leaves the stream led (a metastore outage does not stop appends).

// Led names a stream this star leads, for the row check.
type Led struct {
	ID  string
	Key StreamKey
}

// rowCheckReads bounds the row check's reads in flight, so a star leading
// many streams checks them all within a period (10,000 streams at 5 ms a
// read: about 3 s).
const rowCheckReads = 16

// CheckRows reads the rows of the led streams again, without caching
// them (a stream the idle release forgets meanwhile must not come back
// into the cache), and calls stop, from up to rowCheckReads goroutines at
// once, for each whose rows no longer make it live. It returns how many
// it stopped.
func (c *Catalog) CheckRows(ctx context.Context, led []Led, stop func(Led)) int {
	byBasin := map[string][]Led{}
	for _, l := range led {
		byBasin[l.Key.Basin] = append(byBasin[l.Key.Basin], l)
	}
	var (
		mu      sync.Mutex
		stopped int
		wg      sync.WaitGroup
		sem     = make(chan struct{}, rowCheckReads)
	)
	// In a fixed order (basins by name, their streams by id), so a
	// simulation that schedules the reads replays the same check.
	for _, basin := range slices.Sorted(maps.Keys(byBasin)) {
		led := byBasin[basin]
		slices.SortFunc(led, func(a, b Led) int { return strings.Compare(a.ID, b.ID) })
		b, err := c.fetchBasin(ctx, basin)
		if err != nil {
			continue // judged at the next check
		}
		for _, l := range led {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				e, err := c.fetchStream(ctx, l.Key)
				if err != nil || RowsLive(b, e, l.ID, c.cfg.DeletionPending, c.now()) {
					return
				}
				c.log.Info("row check: stopped leading a stream deleted or replaced elsewhere", "basin", basin, "stream", l.Key.Name, "id", l.ID)
				stop(l)
				c.m.stopped.Inc()
				mu.Lock()
				stopped++
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return stopped
}

// RowsLive says whether basin row b and stream row e (nil: none) still
// make stream id live: the basin alive, the name row naming id in it, not
// deleted.
func RowsLive(b *BasinEntry, e *StreamEntry, id string, pending time.Duration, now time.Time) bool {
	return b != nil && e != nil && LifecycleOf(b.Row.DeletedAt, pending, now) == Alive &&
		e.Row.ID == id && e.Row.BasinID == b.Row.ID && e.Row.DeletedAt == nil
}
