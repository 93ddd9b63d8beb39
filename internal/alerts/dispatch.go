package alerts

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// dest names a delivery's destination: its webhook, or its email address.
// claimDue computes the same.
func (d claimed) dest() string {
	if d.WebhookID != nil {
		return "w:" + strconv.FormatInt(*d.WebhookID, 10)
	}
	if d.EmailTo != nil {
		return "m:" + *d.EmailTo
	}
	return "m:"
}

// batch is the attempts one claim started.
type batch struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// releaseClaim gives back claimed rows a worker has no room for, as if
// never claimed.
const releaseClaim = `
UPDATE alert_deliveries SET locked_until = NULL, attempts = attempts - 1
WHERE id = ANY($1::bigint[])`

// start claims due deliveries (only that one, if not 0) to destinations
// with room (PerDestination attempts each, maxInFlight in all) and starts
// an attempt of each, which records its outcome. It returns how many it
// started.
func (w *Worker) start(ctx context.Context, only int64) (int, *batch, error) {
	b := &batch{}
	w.mu.Lock()
	limit := min(batchSize, maxInFlight-w.total)
	full := []string{}
	for dest, n := range w.inFlight {
		if n >= w.opts.PerDestination {
			full = append(full, dest)
		}
	}
	w.mu.Unlock()
	if limit <= 0 {
		return 0, b, nil
	}
	lease := (w.opts.Timeout + 30*time.Second).Seconds()
	rows, err := w.pool.Query(ctx, claimDue, limit, only, lease, full)
	if err != nil {
		return 0, b, fmt.Errorf("alerts: claim deliveries: %w", err)
	}
	due, err := pgx.CollectRows(rows, pgx.RowToStructByName[claimed])
	if err != nil {
		return 0, b, fmt.Errorf("alerts: claim deliveries: %w", err)
	}
	var back []int64
	started := 0
	w.mu.Lock()
	for _, d := range due {
		dest := d.dest()
		if w.inFlight[dest] >= w.opts.PerDestination {
			back = append(back, d.ID)
			continue
		}
		w.inFlight[dest]++
		w.total++
		timeout := w.opts.Timeout
		if w.slow[dest] {
			timeout = w.opts.SlowTimeout
		}
		started++
		b.wg.Add(1)
		w.running.Add(1)
		go w.run(ctx, d, dest, timeout, b)
	}
	w.mu.Unlock()
	if len(back) > 0 {
		if _, err := w.pool.Exec(context.WithoutCancel(ctx), releaseClaim, back); err != nil {
			// The lease runs out and another claim takes them up.
			return started, b, fmt.Errorf("alerts: release %d claimed deliveries: %w", len(back), err)
		}
	}
	return started, b, nil
}

// run makes one attempt and records it.
func (w *Worker) run(ctx context.Context, d claimed, dest string, timeout time.Duration, b *batch) {
	defer w.running.Done()
	defer b.wg.Done()
	status, sendErr := w.attempt(ctx, d, timeout)
	var de *deliveryError
	timedOut := errors.As(sendErr, &de) && de.shown == "timed out"
	w.mu.Lock()
	w.inFlight[dest]--
	if w.inFlight[dest] == 0 {
		delete(w.inFlight, dest)
	}
	w.total--
	switch {
	case timedOut:
		w.slow[dest] = true
	case sendErr == nil:
		delete(w.slow, dest)
	}
	w.mu.Unlock()
	if err := w.record(ctx, d, status, sendErr); err != nil {
		b.mu.Lock()
		b.errs = append(b.errs, err)
		b.mu.Unlock()
		w.log.Warn("alert deliveries", "err", err)
	}
	w.Wake() // room for the destination's next delivery
}
