package durabletest

import (
	"sync"
	"time"
)

// Clock is the subscription keys' clock in tests (durable.Config.Clock):
// it moves only when told, so a test passes days of rotation at once.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at the wall clock's now.
func NewClock() *Clock { return &Clock{t: time.Now().UTC()} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock d ahead.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
