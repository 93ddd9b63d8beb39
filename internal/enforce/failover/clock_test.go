package failover_test

import (
	"sync"
	"time"
)

// mwClock is a settable clock shared by a memory store and the middleware,
// so header values are exact.
type mwClock struct {
	mu  sync.Mutex
	now time.Time
}

func newMWClock(t time.Time) *mwClock { return &mwClock{now: t} }

func (c *mwClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *mwClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
