package alerts_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/testenv"
)

// hangingReceiver accepts requests and answers none until released,
// counting them and the most it held at once.
type hangingReceiver struct {
	srv     *httptest.Server
	release chan struct{}
	mu      sync.Mutex
	started int
	holding int
	most    int
}

func newHangingReceiver(t *testing.T) *hangingReceiver {
	h := &hangingReceiver{release: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.started++
		h.holding++
		h.most = max(h.most, h.holding)
		h.mu.Unlock()
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
		h.mu.Lock()
		h.holding--
		h.mu.Unlock()
	}))
	t.Cleanup(func() {
		h.unblock()
		h.srv.Close()
	})
	return h
}

func (h *hangingReceiver) unblock() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

func (h *hangingReceiver) counts() (started, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started, h.most
}

// TestHangingReceiverDelaysNoOtherDestination queues five alerts to a
// receiver that never answers and then alerts to another destination:
// those are delivered while every attempt to the hanging one is still
// open (none of its attempts has ended), and the hanging one never holds
// more than PerDestination attempts.
func TestHangingReceiverDelaysNoOtherDestination(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	ctx := context.Background()
	hang := newHangingReceiver(t)
	good := newReceiver(t)
	hangHook, _, err := f.svc.CreateWebhook(ctx, f.dev.ID, hang.srv.URL+"/hang")
	if err != nil {
		t.Fatal(err)
	}
	goodHook, secret, err := f.svc.CreateWebhook(ctx, f.dev.ID, good.srv.URL+"/good")
	if err != nil {
		t.Fatal(err)
	}
	good.secret = []byte(secret)
	for range 5 {
		if _, err := f.svc.EnqueueTest(ctx, f.dev.ID, hangHook.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	w, err := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{Dialer: receiverDialer(), Timeout: time.Minute, PerDestination: 2})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		hang.unblock()
		stop()
		<-done
	}()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("30 s without %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("two attempts at the hanging receiver", func() bool { s, _ := hang.counts(); return s >= 2 })
	for i := range 3 {
		if _, err := f.svc.EnqueueTest(ctx, f.dev.ID, goodHook.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
		w.Wake()
		waitFor("the other destination's alert", func() bool { return len(good.snapshot()) == i+1 })
	}
	var ended int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM alert_delivery_attempts a JOIN alert_deliveries d ON d.id = a.delivery_id WHERE d.webhook_id = $1`, hangHook.ID).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	started, most := hang.counts()
	if ended != 0 {
		t.Errorf("%d attempts at the hanging receiver ended before the other alerts were delivered; want none (they wait a minute)", ended)
	}
	if started != 2 || most != 2 {
		t.Errorf("hanging receiver: %d attempts started, at most %d at once; want 2 and 2 (PerDestination)", started, most)
	}
}

// TestTimingOutDestinationGetsTheShortTimeout: once an attempt to a
// destination timed out, the next gets SlowTimeout, so an answer slower
// than that fails; an attempt that succeeds gives the destination its full
// Timeout back.
func TestTimingOutDestinationGetsTheShortTimeout(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	ctx := context.Background()
	var mu sync.Mutex
	delay := time.Hour // the first attempt hangs past Timeout
	quit := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		d := delay
		mu.Unlock()
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(quit) }) // first: no handler outlives the test
	hook, _, err := f.svc.CreateWebhook(ctx, f.dev.ID, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	w, err := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{Dialer: receiverDialer(), Timeout: 3 * time.Second, SlowTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	attempt := func(answerAfter time.Duration) string {
		t.Helper()
		mu.Lock()
		delay = answerAfter
		mu.Unlock()
		id, err := f.svc.EnqueueTest(ctx, f.dev.ID, hook.ID, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := w.SendNow(ctx, id); !ok || err != nil {
			t.Fatalf("SendNow: %v %v", ok, err)
		}
		var state, lastErr string
		if err := f.pool.QueryRow(ctx, `SELECT state, last_error FROM alert_deliveries WHERE id = $1`, id).Scan(&state, &lastErr); err != nil {
			t.Fatal(err)
		}
		return state + " " + lastErr
	}
	for _, step := range []struct {
		answerAfter time.Duration
		want        string
	}{
		{time.Hour, "pending timed out"},              // Timeout: the destination is slow now
		{500 * time.Millisecond, "pending timed out"}, // SlowTimeout cuts a half-second answer short
		{0, "delivered "},                             // a prompt answer...
		{500 * time.Millisecond, "delivered "},        // ...gives it Timeout back
	} {
		if got := attempt(step.answerAfter); got != step.want {
			t.Errorf("answer after %s: %q, want %q", step.answerAfter, got, step.want)
		}
	}
}
