package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/testenv"
)

const (
	actor = "user:1"
	// itemsLimit is the shop plan's tier on "GET /items/{id}".
	itemsLimit = 5
	itemsRoute = "GET /items/{id}"
	// slotsRoute has a concurrency tier: its admissions carry a lease
	// token for the gateway alone.
	slotsRoute = "GET /slots/{id}"
)

// fixture is a control plane with a declared "shop" service, a plan
// limiting one of its routes, a key on that plan, and the engine deciding
// on a memory store, as cmd/portal wires them.
type fixture struct {
	pool     *pgxpool.Pool
	plans    *plans.Service
	keys     *apikeys.Service
	services *services.Repo
	holder   *snapshot.Holder
	store    enforce.Store
	mw       *httplimit.Middleware
	plan     plans.Plan
	key      apikeys.Key
	secret   string
	logger   *slog.Logger
	// check is what the check server answers with (see useCheck).
	check atomic.Pointer[http.Handler]
}

func newFixture(t testing.TB, store enforce.Store) *fixture {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &fixture{pool: pool, logger: logger, store: store,
		plans:    plans.NewService(pool, nil, logger),
		keys:     apikeys.NewService(pool, nil, logger),
		services: services.NewRepo(pool),
	}
	f.seed(t)
	f.holder = snapshot.NewHolder(pool, logger, snapshot.Options{Coalesce: time.Millisecond})
	if err := f.holder.Load(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.holder.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	if f.store == nil {
		f.store = memstore.New(memstore.Options{})
	}
	f.mw = httplimit.NewMiddleware(f.store, f.holder, httplimit.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Logger:         logger,
	})
	return f
}

// seed declares the shop service, its plan and a developer's key on it.
func (f *fixture) seed(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.services.Create(ctx, actor, services.Input{Slug: "shop", Name: "Shop",
		Routes: []string{itemsRoute, "POST /orders", "GET /files/{path...}", slotsRoute}}); err != nil {
		t.Fatal(err)
	}
	var err error
	f.plan, err = f.plans.Create(ctx, actor, plans.PlanInput{Slug: "shop", Name: "Shop", IsDefault: true,
		Limits: []plans.LimitInput{{Name: "items", Route: itemsRoute, Algorithm: "fixed_window",
			Limit: itemsLimit, WindowSeconds: 3600},
			{Name: "files", Route: "GET /files/{path...}", Algorithm: "fixed_window", Limit: 1, WindowSeconds: 3600, Mode: "degrade"},
			{Name: "slots", Route: slotsRoute, Algorithm: "concurrency", Limit: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	var dev int64
	if err := f.pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ('dev@example.com', 'x', 'developer') RETURNING id`).Scan(&dev); err != nil {
		t.Fatal(err)
	}
	f.key, f.secret, err = f.keys.Create(ctx, actor, apikeys.NewKey{UserID: dev, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
}

// catalogs reads the holder's current snapshot.
func (f *fixture) catalogs() gateway.Catalogs {
	return gateway.CatalogFunc(func() *services.Catalog { return f.holder.Current().Services() })
}

// checkServer serves /v1/check as cmd/portal mounts it, deciding with the
// fixture's middleware until useCheck swaps in another.
func (f *fixture) checkServer(t testing.TB) *httptest.Server {
	t.Helper()
	f.useCheck(gateway.NewCheck(f.catalogs(), f.mw, f.logger))
	mux := http.NewServeMux()
	mux.Handle(gateway.CheckPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*f.check.Load()).ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// useCheck makes the check server answer with h.
func (f *fixture) useCheck(h http.Handler) { f.check.Store(&h) }

// outageCheck is /v1/check on the fixture's plans while the shared store
// (Redis) is unreachable, in the portal's failure mode: local decides on
// this instance's memory, closed refuses.
func (f *fixture) outageCheck(mode enforce.FailureMode) http.Handler {
	fo := failover.Options{}
	if mode == enforce.FailLocal {
		fo.Local = memstore.New(memstore.Options{})
	}
	mw := httplimit.NewMiddleware(failover.New(unreachableStore{}, fo), f.holder, httplimit.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Logger:         f.logger,
		FailureMode:    mode,
	})
	return gateway.NewCheck(f.catalogs(), mw, f.logger)
}

// unreachableStore is a Redis that refuses every connection.
type unreachableStore struct{}

func (unreachableStore) Allow(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, fmt.Errorf("%w: dial tcp 127.0.0.1:6379: connection refused", enforce.ErrStoreUnavailable)
}

func (unreachableStore) Peek(context.Context, enforce.Request) (enforce.Decision, error) {
	return enforce.Decision{}, fmt.Errorf("%w: dial tcp 127.0.0.1:6379: connection refused", enforce.ErrStoreUnavailable)
}

// upstream is the protected API: it counts the requests that reach it.
type upstream struct {
	*httptest.Server
	served atomic.Int64
	// last holds the headers of the last request served.
	last atomic.Pointer[http.Header]
}

// lastHeader returns the headers of the last request the upstream served.
func (u *upstream) lastHeader() http.Header {
	if h := u.last.Load(); h != nil {
		return *h
	}
	return http.Header{}
}

func newUpstream(t testing.TB) *upstream {
	t.Helper()
	return newUpstreamWith(t, false)
}

// echoed are the decision's headers an echoing upstream takes off the
// request and puts on its answer.
var echoed = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Sluice-RateLimit-Degraded"}

// newUpstreamWith is newUpstream; with echo it copies the decision's
// headers from the request onto its answer, as an API behind a gateway that
// cannot (Traefik) does.
func newUpstreamWith(t testing.TB, echo bool) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.served.Add(1)
		h := r.Header.Clone()
		u.last.Store(&h)
		if echo {
			for _, h := range echoed {
				if v := r.Header.Get(h); v != "" {
					w.Header().Set(h, v)
				}
				r.Header.Del(h)
			}
			if v := r.Header.Get("Sluice-Degraded"); v != "" {
				w.Header().Set("Sluice-Degraded", v)
			}
		}
		for name := range r.Header {
			// The gateway configs strip the decision's headers from
			// what the API receives, and Sluice's internal ones (the
			// route, the error body, lease tokens): only the degrade
			// marker and the caller's identity go on.
			lower := strings.ToLower(name)
			if strings.Contains(lower, "ratelimit") || strings.HasPrefix(lower, "sluice-") && name != "Sluice-Degraded" && !slices.Contains(gateway.IdentityHeaders, name) {
				http.Error(w, "the upstream got "+name, http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "served "+r.Method+" "+r.URL.Path)
		if d := r.Header.Get("Sluice-Degraded"); d != "" {
			_, _ = io.WriteString(w, " (degraded: "+d+")")
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// waitFor blocks until cond holds for the holder's current snapshot,
// woken by each rebuild; the deadline only bounds a broken notification.
func (f *fixture) waitFor(t testing.TB, cond func(*snapshot.Snapshot) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed := f.holder.Changed()
		if cond(f.holder.Current()) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the snapshot never showed the change")
		}
	}
}

// setUpstream gives the shop service an upstream URL and waits until the
// snapshot serves it.
func (f *fixture) setUpstream(t testing.TB, upstream string) {
	t.Helper()
	ctx := context.Background()
	s, err := f.services.Get(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	in := services.Input{Slug: s.Slug, Name: s.Name, Hosts: []string{"shop.example.com"}, Upstream: upstream, Routes: s.Routes}
	if _, err := f.services.Update(ctx, actor, s.Slug, s.Version, in); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, func(snap *snapshot.Snapshot) bool {
		svc, ok := snap.Services().Service("shop")
		return ok && svc.Upstream == upstream
	})
}
