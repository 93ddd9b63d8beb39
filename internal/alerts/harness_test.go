package alerts_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
)

var sessionSecret = []byte("0123456789abcdef0123456789abcdef-alerts-test")

// receivers are the rules of the tests' webhooks: their receivers listen on
// 127.0.0.1, which only an operator's allowlist opens.
var receivers = egress.Rules{Allow: egress.Allowlist{Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}

// receiverDialer reaches the tests' receivers.
func receiverDialer() *egress.Dialer { return egress.NewDialer(egress.Options{Rules: receivers}) }

// fixture is one developer with a key on a plan of one limit.
type fixture struct {
	t      *testing.T
	pool   *pgxpool.Pool
	plans  *plans.Service
	keys   *apikeys.Service
	svc    *alerts.Service
	dev    users.User
	key    apikeys.Key
	limits []enforce.Limit
	planID *int64
}

func newFixture(t *testing.T, pool *pgxpool.Pool, limit plans.LimitInput) *fixture {
	t.Helper()
	f := newPlanFixture(t, pool, limit)
	f.t = t
	return f
}

// newPlanFixture is newFixture for benchmarks too (f.t stays nil).
func newPlanFixture(t testing.TB, pool *pgxpool.Pool, limit plans.LimitInput) *fixture {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	f := &fixture{pool: pool, plans: plans.NewService(pool, nil, logger), keys: apikeys.NewService(pool, nil, logger)}
	p, err := f.plans.Create(ctx, "test", plans.PlanInput{Slug: "metered", Name: "Metered", Limits: []plans.LimitInput{limit}})
	if err != nil {
		t.Fatalf("create plan: %v", err)
	}
	f.planID = &p.ID
	if f.dev, err = users.NewRepo(pool).Create(ctx, users.NewUser{Email: "dev@example.com", Password: "correct horse battery", Role: users.RoleDeveloper, PlanID: &p.ID}); err != nil {
		t.Fatalf("create developer: %v", err)
	}
	if f.key, _, err = f.keys.Create(ctx, "test", apikeys.NewKey{UserID: f.dev.ID, Name: "backend"}); err != nil {
		t.Fatalf("create key: %v", err)
	}
	if f.limits, err = f.plans.KeyLimits(ctx, f.key.PlanSlug, f.key.Overrides); err != nil || len(f.limits) != 1 {
		t.Fatalf("key limits: %v %v", f.limits, err)
	}
	if f.svc, err = alerts.NewService(pool, sessionSecret, receivers); err != nil {
		t.Fatal(err)
	}
	return f
}

// request is what the middleware asks the store for one of the key's
// requests.
func (f *fixture) request() enforce.Request {
	return enforce.Request{Subject: enforce.DeveloperSubject(f.dev.ID), Key: enforce.KeyScope(f.key.ID), Limits: f.limits, Route: "GET /api/search", Anchor: f.dev.CreatedAt}
}

// spend admits n requests through store, failing the test on a rejection.
func (f *fixture) spend(store enforce.Store, n int) {
	f.t.Helper()
	for range n {
		d, err := store.Allow(context.Background(), f.request())
		if err != nil || !d.Allowed {
			f.t.Fatalf("allow: %+v %v", d, err)
		}
	}
}

func (f *fixture) evaluator(pool *pgxpool.Pool, store enforce.Store, email bool) *alerts.Evaluator {
	return alerts.NewEvaluator(pool, alerts.EvaluatorOptions{Store: store, Email: email})
}

func (f *fixture) evaluate(e *alerts.Evaluator) int {
	f.t.Helper()
	n, err := e.Evaluate(context.Background())
	if err != nil {
		f.t.Fatalf("evaluate: %v", err)
	}
	return n
}

// receiver is a webhook endpoint that checks every signature and answers
// with the statuses given, then 200.
type receiver struct {
	srv    *httptest.Server
	secret []byte
	mu     sync.Mutex
	script []int
	// calls holds every request's event and answer, in order.
	calls []call
}

type call struct {
	event    alerts.Event
	status   int
	delivery string
}

func newReceiver(t *testing.T, script ...int) *receiver {
	r := &receiver{script: script}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := alerts.Verify(r.secret, req.Header.Get(alerts.SignatureHeader), body, time.Now(), 0); err != nil {
			t.Errorf("delivery %s: %v", req.Header.Get(alerts.DeliveryHeader), err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev alerts.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("body: %v", err)
		}
		if req.Header.Get(alerts.EventHeader) != ev.Type {
			t.Errorf("%s header %q, body type %q", alerts.EventHeader, req.Header.Get(alerts.EventHeader), ev.Type)
		}
		status := http.StatusOK
		if len(r.script) > 0 {
			status, r.script = r.script[0], r.script[1:]
		}
		r.calls = append(r.calls, call{event: ev, status: status, delivery: req.Header.Get(alerts.DeliveryHeader)})
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// drain runs the worker until nothing is pending (retries included).
func drain(t *testing.T, pool *pgxpool.Pool, w *alerts.Worker) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := w.SendDue(ctx); err != nil {
			t.Fatalf("send: %v", err)
		}
		var pending int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM alert_deliveries WHERE state = 'pending'`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("deliveries still pending after 30s")
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
