package guard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/plans"
)

// TestGuardReleasesConcurrencySlotsOnReturn: a concurrency tier from the
// portal's policy holds a slot while the service's handler runs and gives
// it back when the handler returns.
func TestGuardReleasesConcurrencySlotsOnReturn(t *testing.T) {
	p := newPortal(t)
	ctx := context.Background()
	if _, err := p.plans.AddLimit(ctx, actor, p.plan.ID, p.plan.Version,
		plans.LimitInput{Name: "in-flight", Route: "GET /items/{id}", Algorithm: "concurrency", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	// The portal's snapshot picks the edit up asynchronously: wait for its
	// policy to carry the tier before the guard fetches it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", p.url+gateway.PolicyPath, nil)
		req.Header.Set("Authorization", "Bearer "+p.token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(body), `"concurrency"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy never carried the concurrency tier: %s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	g, err := guard.New(ctx, guard.Options{PortalURL: p.url, Token: p.token})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	started, finish := make(chan struct{}, 2), make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-finish:
		case <-time.After(10 * time.Second): // a request wrongly admitted fails, not hangs
		}
	})))
	get := func() int {
		r := httptest.NewRequest("GET", "/items/1", nil)
		r.Header.Set("X-API-Key", p.secret)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}
	first := make(chan int, 1)
	go func() { first <- get() }()
	<-started
	if code := get(); code != http.StatusTooManyRequests {
		t.Fatalf("a second request in flight: %d, want 429", code)
	}
	close(finish)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("first request: %d", code)
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("after the first returned: %d, want 200", code)
	}
}
