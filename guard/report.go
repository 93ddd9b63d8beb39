package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/requestlog"
)

// The guard reports its decisions to the portal's request log (POST
// /v1/policy/log with the service token), since it alone sees the
// protected API's status and latency. Reporting never holds a request
// back: decisions queue in memory (reportQueue of them at most; past that
// they are dropped and counted) and go in batches every reportEvery.
const (
	reportQueue = 8192
	reportEvery = time.Second
)

// reporter ships decisions to the portal.
type reporter struct {
	url, token string
	client     *http.Client
	log        *slog.Logger
	queue      chan requestlog.Entry
	dropped    atomic.Int64
	done       chan struct{}
}

func newReporter(url, token string, client *http.Client, log *slog.Logger) *reporter {
	return &reporter{url: url, token: token, client: client, log: log,
		queue: make(chan requestlog.Entry, reportQueue), done: make(chan struct{})}
}

// Log queues e for the portal (httplimit.RequestLog); a full queue drops it.
func (r *reporter) Log(e requestlog.Entry) {
	select {
	case r.queue <- e:
	default:
		r.dropped.Add(1)
	}
}

// run sends batches until ctx ends, then what is left, once.
func (r *reporter) run(ctx context.Context) {
	defer close(r.done)
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	var batch []gateway.GuardLogEntry
	failing := false
	send := func() {
		for len(batch) > 0 {
			n := min(len(batch), gateway.MaxGuardLogBatch)
			err := r.post(batch[:n])
			if err != nil && !failing {
				r.log.Warn("sluice guard: decisions could not be reported to the portal's request log; dropping them until it answers", "err", err)
			}
			if err == nil && failing {
				r.log.Info("sluice guard: reporting decisions to the portal again")
			}
			failing = err != nil
			batch = batch[n:]
		}
		batch = batch[:0]
	}
	for {
		select {
		case e := <-r.queue:
			batch = append(batch, gateway.FromEntry(e))
			if len(batch) >= gateway.MaxGuardLogBatch {
				send()
			}
		case <-tick.C:
			send()
		case <-ctx.Done():
			for {
				select {
				case e := <-r.queue:
					batch = append(batch, gateway.FromEntry(e))
					continue
				default:
				}
				break
			}
			send()
			return
		}
	}
}

// post sends one batch; a batch the portal does not take is dropped (the
// log is a record, not a ledger: counts are the store's).
func (r *reporter) post(batch []gateway.GuardLogEntry) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := r.client.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		return &reportError{status: res.StatusCode}
	}
	return nil
}

type reportError struct{ status int }

func (e *reportError) Error() string { return "the portal answered " + http.StatusText(e.status) }
