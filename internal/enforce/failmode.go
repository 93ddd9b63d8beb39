package enforce

import (
	"errors"
	"fmt"
	"time"
)

// FailureMode says what a request gets while the shared store (Redis) is
// unreachable; PORTAL_REDIS_FAILURE_MODE holds one of its values.
type FailureMode string

const (
	// FailOpen admits every request without a decision and marks the
	// response with HeaderStoreDegraded: availability over enforcement.
	FailOpen FailureMode = "open"
	// FailClosed answers 503: enforcement over availability.
	FailClosed FailureMode = "closed"
	// FailLocal decides with a per-instance memory store whose limits are
	// divided by the number of instances, so the fleet as a whole stays near
	// the configured limits.
	FailLocal FailureMode = "local"
)

// ParseFailureMode parses "open", "closed" or "local".
func ParseFailureMode(s string) (FailureMode, error) {
	switch m := FailureMode(s); m {
	case FailOpen, FailClosed, FailLocal:
		return m, nil
	}
	return "", fmt.Errorf("redis failure mode %q: want open, closed or local", s)
}

// ErrCircuitOpen is returned (wrapped, together with ErrStoreUnavailable) by
// a failover.Store without a local store while its circuit breaker is open:
// the primary was not called at all.
var ErrCircuitOpen = errors.New("circuit breaker open")

// DefaultStoreTimeout bounds each call to a shared store when no other
// timeout is configured: 2.7 times the worst p99.9 decision latency measured
// on a loaded 2-core host (docs/failure.md), so a busy host's stall is waited
// out while a hung Redis is given up on.
const DefaultStoreTimeout = time.Second
