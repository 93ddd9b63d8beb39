package guard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/enforce"
)

// TestGuardSettlesTheCostAfterTheResponse: a tier counting successes only,
// fetched by a guard from the portal's policy feed, gives an error's cost
// back in the guard's own store: three errors and three successes pass a
// tier of three, the fourth success is refused.
func TestGuardSettlesTheCostAfterTheResponse(t *testing.T) {
	p := newPortal(t)
	ctx := context.Background()
	in := p.plan.Limits[0].Input()
	in.CountWhen = "success"
	if _, err := p.plans.UpdateLimit(ctx, actor, p.plan.ID, p.plan.Version, p.plan.Limits[0].ID, in); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		changed := p.holder.Changed()
		if c, err := p.holder.ResolveKey(p.secret); err == nil && len(c.Limits) == 1 && c.Limits[0].CountWhen == enforce.CountSuccess {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the snapshot never showed the edit")
		}
	}
	g, err := guard.New(ctx, guard.Options{PortalURL: p.url, Token: p.token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})))
	ask := func(q string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/items/1?"+q, nil)
		r.Header.Set("Authorization", "Bearer "+p.secret)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	for i, q := range []string{"fail=1", "", "fail=1", "", "fail=1", ""} {
		want := http.StatusOK
		if q != "" {
			want = http.StatusInternalServerError
		}
		if w := ask(q); w.Code != want {
			t.Fatalf("request %d (%s): %d, want %d", i, q, w.Code, want)
		}
	}
	if w := ask(""); w.Code != http.StatusTooManyRequests {
		t.Errorf("a fourth success: %d, want 429", w.Code)
	}
	if w := ask("fail=1"); w.Code != http.StatusTooManyRequests {
		t.Errorf("after the limit, an error: %d, want 429 (a refusal is immediate)", w.Code)
	}
}
