package playground

import (
	"context"
	"errors"
)

// DefaultParallel is how many replays a Runner lets run at once unless told
// otherwise.
const DefaultParallel = 2

// ErrBusy is returned by Runner.Replay when every slot is taken: the caller
// should try again shortly (the portal answers 503 with Retry-After).
var ErrBusy = errors.New("playground: busy, too many replays running")

// Runner runs replays, at most a fixed number at once. A replay is bounded
// on its own (MaxDecisions, MaxArrivals); the Runner bounds how many such
// replays hold the portal's CPU and memory together. One Runner is shared by
// every way into the playground (the dashboard and the admin API).
type Runner struct {
	slots chan struct{}
}

// NewRunner returns a Runner that runs at most parallel replays at once
// (DefaultParallel when parallel < 1).
func NewRunner(parallel int) *Runner {
	if parallel < 1 {
		parallel = DefaultParallel
	}
	return &Runner{slots: make(chan struct{}, parallel)}
}

// Replay runs sc as the package's Replay does when a slot is free, and
// returns ErrBusy at once when none is: a request waiting behind others
// would hold its memory (the arrivals) while it waits.
func (r *Runner) Replay(ctx context.Context, sc Scenario) (Report, error) {
	select {
	case r.slots <- struct{}{}:
	default:
		return Report{}, ErrBusy
	}
	defer func() { <-r.slots }()
	return Replay(ctx, sc)
}
