package failover_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// scriptedStore is a primary whose every call answers with the error err
// returns (nil: an admission), so breaker tests choose each outcome.
type scriptedStore struct {
	mu    sync.Mutex
	err   func() error
	calls int
}

func (s *scriptedStore) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	s.mu.Lock()
	s.calls++
	next := s.err
	s.mu.Unlock()
	if err := next(); err != nil {
		return enforce.Decision{}, err
	}
	return enforce.Decision{Allowed: true, Layers: []enforce.LayerResult{{Limit: req.Limits[0], Allowed: true}}}, nil
}

func (s *scriptedStore) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.Allow(ctx, req)
}

func (s *scriptedStore) answer(err func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *scriptedStore) callCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// batchFailure is an unavailable-store error naming its batch, as a
// RedisStore's are.
type batchFailure struct{ batch uint64 }

func (e batchFailure) Error() string        { return fmt.Sprintf("batch %d failed", e.batch) }
func (e batchFailure) Unwrap() error        { return enforce.ErrStoreUnavailable }
func (e batchFailure) FailureCause() uint64 { return e.batch }
func succeed() error                        { return nil }
func failWith(err error) func() error       { return func() error { return err } }
func timeoutErr() error {
	return fmt.Errorf("%w: %w", enforce.ErrStoreUnavailable, context.DeadlineExceeded)
}
func refused() error {
	return fmt.Errorf("%w: dial tcp: connection refused", enforce.ErrStoreUnavailable)
}
func errorsOf(errs ...error) func() error {
	i := 0
	return func() error { i++; return errs[(i-1)%len(errs)] }
}
func distinctBatches(from uint64) func() error {
	var mu sync.Mutex
	return func() error { mu.Lock(); defer mu.Unlock(); from++; return batchFailure{from} }
}

type breakerEnv struct {
	primary *scriptedStore
	store   *failover.Store
	clock   *storetest.Clock
	reg     *prometheus.Registry
	logs    *bytes.Buffer
}

// newBreakerEnv builds a FailoverStore with the default breaker settings
// over a scripted primary, on a clock that moves only when the test says.
func newBreakerEnv(t *testing.T) *breakerEnv {
	t.Helper()
	e := &breakerEnv{primary: &scriptedStore{err: succeed}, clock: storetest.NewClockAt(time.Unix(1_800_000_000, 0)),
		reg: prometheus.NewRegistry(), logs: &bytes.Buffer{}}
	e.store = failover.New(e.primary, failover.Options{
		Local: memstore.New(memstore.Options{}), Now: e.clock.Now, Registerer: e.reg,
		Logger: slog.New(slog.NewTextHandler(e.logs, nil)),
	})
	return e
}

func (e *breakerEnv) decide(t *testing.T, n int) {
	t.Helper()
	for range n {
		_, err := e.store.Allow(context.Background(), enforce.Request{Subject: "key:1",
			Limits: []enforce.Limit{{Name: "l", Algorithm: enforce.FixedWindow, Limit: 1e9, Window: time.Hour}}})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (e *breakerEnv) opens(t *testing.T, reason string) float64 {
	return gatherValue(t, e.reg, "sluice_store_breaker_opens_total", map[string]string{"reason": reason})
}

func TestBreakerOpensOnAnOutageNotOnAStall(t *testing.T) {
	t.Run("StallOfOneBatchUnder64CallersStaysClosed", func(t *testing.T) {
		e := newBreakerEnv(t)
		e.decide(t, 200)
		// 64 callers whose decisions were queued in two batches, both
		// stalled past the timeout: two failures, not 64.
		e.primary.answer(errorsOf(append(repeat(batchFailure{7}, 32), repeat(batchFailure{8}, 32)...)...))
		e.decide(t, 64)
		e.primary.answer(succeed)
		e.decide(t, 10)
		if got := e.store.BreakerState(); got != "closed" {
			t.Fatalf("breaker %s after one stalled round trip", got)
		}
	})
	t.Run("StallOfEveryCallerOnAQuietInstanceStaysClosed", func(t *testing.T) {
		// Nothing but the stalled batches in the window: 64 failed
		// decisions, 100 % of outcomes, but two causes only.
		e := newBreakerEnv(t)
		e.primary.answer(errorsOf(append(repeat(batchFailure{1}, 40), repeat(batchFailure{2}, 24)...)...))
		e.decide(t, 64)
		if got := e.store.BreakerState(); got != "closed" {
			t.Fatalf("breaker %s after one stall of two batches", got)
		}
	})
	t.Run("RefusedConnectionsOpenIt", func(t *testing.T) {
		e := newBreakerEnv(t)
		e.decide(t, 5)
		e.primary.answer(refused)
		for i := 1; e.store.BreakerState() == "closed"; i++ {
			if i > failover.DefaultBreakerMinRequests {
				t.Fatalf("still closed after %d refused calls", i)
			}
			e.decide(t, 1)
		}
		// Five successes and 15 failures: 20 decisions, 75 % failed.
		if calls := e.primary.callCount(); calls != failover.DefaultBreakerMinRequests {
			t.Errorf("opened after %d calls, want %d (the minimum volume)", calls, failover.DefaultBreakerMinRequests)
		}
		if got := e.opens(t, "errors"); got != 1 {
			t.Errorf("opens{reason=errors} = %v, want 1", got)
		}
		if n := strings.Count(e.logs.String(), "circuit breaker open"); n != 1 {
			t.Errorf("%d log lines saying the breaker opened, want 1:\n%s", n, e.logs)
		}
		if !strings.Contains(e.logs.String(), "reason=errors") {
			t.Errorf("log does not say why: %s", e.logs)
		}
		// Open: the primary is not called, the local store decides.
		before := e.primary.callCount()
		e.decide(t, 100)
		if after := e.primary.callCount(); after != before {
			t.Errorf("primary called %d times while open", after-before)
		}
	})
	t.Run("TimeoutsOfDistinctBatchesOpenIt", func(t *testing.T) {
		e := newBreakerEnv(t)
		e.primary.answer(distinctBatches(100))
		e.decide(t, failover.DefaultBreakerMinRequests)
		if got := e.store.BreakerState(); got != "open" {
			t.Fatalf("breaker %s after %d failed batches", got, failover.DefaultBreakerMinRequests)
		}
		if got := e.opens(t, "errors"); got != 1 {
			t.Errorf("opens{reason=errors} = %v, want 1", got)
		}
		e2 := newBreakerEnv(t)
		e2.primary.answer(timeoutErr)
		e2.decide(t, failover.DefaultBreakerMinRequests)
		if got := e2.opens(t, "timeouts"); got != 1 {
			t.Errorf("opens{reason=timeouts} = %v, want 1", got)
		}
	})
	t.Run("FewerThanTheMinimumVolumeStaysClosed", func(t *testing.T) {
		e := newBreakerEnv(t)
		e.primary.answer(refused)
		e.decide(t, failover.DefaultBreakerMinRequests-1)
		if got := e.store.BreakerState(); got != "closed" {
			t.Fatalf("breaker %s after %d decisions", got, failover.DefaultBreakerMinRequests-1)
		}
	})
	t.Run("BelowHalfFailedStaysClosed", func(t *testing.T) {
		e := newBreakerEnv(t)
		// Alternate: one failure, two successes, for a window's worth.
		e.primary.answer(errorsOf(refused(), nil, nil))
		e.decide(t, 300)
		if got := e.store.BreakerState(); got != "closed" {
			t.Fatalf("breaker %s with a third of decisions failing", got)
		}
	})
	t.Run("FailuresOlderThanTheWindowAreForgotten", func(t *testing.T) {
		e := newBreakerEnv(t)
		e.primary.answer(refused)
		e.decide(t, failover.DefaultBreakerMinRequests-1)
		e.clock.Advance(failover.DefaultBreakerWindow)
		e.decide(t, failover.DefaultBreakerMinRequests-1)
		if got := e.store.BreakerState(); got != "closed" {
			t.Fatalf("breaker %s: failures of two windows added up", got)
		}
		e.clock.Advance(failover.DefaultBreakerWindow / 2)
		e.decide(t, 1) // 19 within the last half window + this one
		if got := e.store.BreakerState(); got != "open" {
			t.Fatalf("breaker %s with %d failures in the window", got, failover.DefaultBreakerMinRequests)
		}
	})
}

func repeat(err error, n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func TestBreakerClosesAfterHalfOpenProbes(t *testing.T) {
	e := newBreakerEnv(t)
	e.primary.answer(refused)
	e.decide(t, failover.DefaultBreakerMinRequests)
	if got := e.store.BreakerState(); got != "open" {
		t.Fatalf("breaker %s", got)
	}

	t.Run("NoProbeBeforeTheCooldown", func(t *testing.T) {
		before := e.primary.callCount()
		e.clock.Advance(failover.DefaultBreakerCooldown - time.Millisecond)
		e.decide(t, 10)
		if after := e.primary.callCount(); after != before {
			t.Errorf("primary called %d times during the cool-down", after-before)
		}
	})
	t.Run("AFailedProbeOpensItForAnotherCooldown", func(t *testing.T) {
		e.clock.Advance(time.Millisecond)
		before := e.primary.callCount()
		e.decide(t, 10)
		if after := e.primary.callCount(); after != before+1 {
			t.Errorf("primary called %d times after the cool-down, want one probe", after-before)
		}
		if got := e.store.BreakerState(); got != "open" {
			t.Errorf("breaker %s after a failed probe", got)
		}
	})
	t.Run("ProbesInARowClose", func(t *testing.T) {
		e.primary.answer(succeed)
		e.clock.Advance(failover.DefaultBreakerCooldown)
		for i := range failover.DefaultBreakerProbes {
			if got := e.store.BreakerState(); got == "closed" {
				t.Fatalf("closed after %d probes, want %d", i, failover.DefaultBreakerProbes)
			}
			e.decide(t, 1)
		}
		if got := e.store.BreakerState(); got != "closed" {
			t.Fatalf("breaker %s after %d successful probes", got, failover.DefaultBreakerProbes)
		}
		if open := gatherValue(t, e.reg, "sluice_store_breaker_open", nil); open != 0 {
			t.Errorf("sluice_store_breaker_open = %v after closing", open)
		}
		// Closed afresh: the outage's failures are not held against it.
		e.primary.answer(refused)
		e.decide(t, failover.DefaultBreakerMinRequests-1)
		if got := e.store.BreakerState(); got != "closed" {
			t.Errorf("breaker %s: the outage before closing still counted", got)
		}
	})
}

func TestBreakerLetsOneProbeAtATime(t *testing.T) {
	e := newBreakerEnv(t)
	e.primary.answer(refused)
	e.decide(t, failover.DefaultBreakerMinRequests)
	e.clock.Advance(failover.DefaultBreakerCooldown)
	release := make(chan struct{})
	entered := make(chan struct{}, 100)
	e.primary.answer(func() error { entered <- struct{}{}; <-release; return nil })
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.decide(t, 1) }()
	<-entered // the probe is at the primary
	e.decide(t, 20)
	close(release)
	wg.Wait()
	if calls := len(entered); calls != 0 {
		t.Errorf("%d more calls reached the primary while a probe was in flight", calls)
	}
}
