package sampleapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/sampleapi"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type env struct {
	clock   *clock
	handler http.Handler
}

// newEnv mounts the sample API under /api/ of an outer mux, as the portal
// does, decided by a memory store on a controlled clock.
func newEnv(t *testing.T, opts sampleapi.Options) *env {
	t.Helper()
	c := &clock{now: time.Unix(1724188777, 0)}
	store := memstore.New(memstore.Options{Now: c.Now})
	mw := httplimit.NewMiddleware(store, sampleapi.NewDemoResolver(), httplimit.Options{Now: c.Now})
	opts.Now = c.Now
	outer := http.NewServeMux()
	outer.Handle("/api/", sampleapi.New(mw, opts))
	return &env{clock: c, handler: outer}
}

func (e *env) do(t *testing.T, method, path, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.RemoteAddr = "203.0.113.50:1234"
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	e.handler.ServeHTTP(w, r)
	return w
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.NewDecoder(w.Body).Decode(&v); err != nil {
		t.Fatalf("decode %T: %v", v, err)
	}
	return v
}

type searchBody struct {
	Query    string           `json:"query"`
	Total    int              `json:"total"`
	Items    []sampleapi.Item `json:"items"`
	Degraded bool             `json:"degraded"`
	Cached   bool             `json:"cached"`
	Reduced  bool             `json:"reduced"`
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

type jobBody struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	StatusURL string    `json:"status_url"`
	Query     string    `json:"query"`
	CreatedAt time.Time `json:"created_at"`
	StartsAt  time.Time `json:"starts_at"`
	Result    *struct {
		Items             int   `json:"items"`
		AveragePriceCents int64 `json:"average_price_cents"`
	} `json:"result"`
}

func TestItems(t *testing.T) {
	e := newEnv(t, sampleapi.Options{CatalogueSize: 100})
	cases := []struct {
		name      string
		path      string
		wantCode  int
		wantID    int
		wantError string
	}{
		{name: "Found", path: "/api/items/1", wantCode: 200, wantID: 1},
		{name: "LastFound", path: "/api/items/100", wantCode: 200, wantID: 100},
		{name: "ZeroNotFound", path: "/api/items/0", wantCode: 404, wantError: "not_found"},
		{name: "PastEndNotFound", path: "/api/items/101", wantCode: 404, wantError: "not_found"},
		{name: "NonNumericIsBadRequest", path: "/api/items/abc", wantCode: 400, wantError: "bad_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := e.do(t, "GET", tc.path, "", "")
			if w.Code != tc.wantCode {
				t.Fatalf("status %d, want %d", w.Code, tc.wantCode)
			}
			if w.Header().Get("RateLimit-Policy") != `"anonymous-global";q=60;w=60` {
				t.Errorf("RateLimit-Policy %q", w.Header().Get("RateLimit-Policy"))
			}
			if tc.wantError != "" {
				if b := decode[errorBody](t, w); b.Error != tc.wantError || b.Message == "" {
					t.Errorf("body %+v", b)
				}
				return
			}
			it := decode[sampleapi.Item](t, w)
			if it.ID != tc.wantID || it.Name == "" || it.Description == "" || it.PriceCents < 500 {
				t.Errorf("item %+v", it)
			}
		})
	}
	t.Run("InvalidKeyIs401", func(t *testing.T) {
		if w := e.do(t, "GET", "/api/items/1", "sk_demo_wrong", ""); w.Code != 401 {
			t.Errorf("status %d", w.Code)
		}
	})
}

func TestSearch(t *testing.T) {
	e := newEnv(t, sampleapi.Options{})
	t.Run("FindsAndRanksMatches", func(t *testing.T) {
		w := e.do(t, "GET", "/api/search?q=amber+lantern", sampleapi.DemoProKey, "")
		if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") == "" {
			t.Fatalf("status %d, headers %v", w.Code, w.Header())
		}
		b := decode[searchBody](t, w)
		if b.Query != "amber lantern" || b.Total == 0 || len(b.Items) != 20 || b.Degraded || b.Cached || b.Reduced {
			t.Fatalf("body %+v", b)
		}
		if !strings.Contains(b.Items[0].Name, "amber") || !strings.Contains(b.Items[0].Name, "lantern") {
			t.Errorf("best match %q lacks a query word in its name", b.Items[0].Name)
		}
	})
	t.Run("MissingQueryIs400", func(t *testing.T) {
		w := e.do(t, "GET", "/api/search", sampleapi.DemoProKey, "")
		if b := decode[errorBody](t, w); w.Code != 400 || b.Error != "invalid_query" || !strings.Contains(b.Message, "q") {
			t.Errorf("status %d body %+v", w.Code, b)
		}
	})
	t.Run("OverDegradeLimitServesCachedThenReduced", func(t *testing.T) {
		// The free plan's search tier: 30 per minute, degrade mode.
		for i := range 30 {
			if w := e.do(t, "GET", "/api/search?q=oak", sampleapi.DemoFreeKey, ""); w.Code != 200 || w.Header().Get(httplimit.HeaderDegraded) != "" {
				t.Fatalf("request %d: status %d degraded %q", i, w.Code, w.Header().Get(httplimit.HeaderDegraded))
			}
		}
		w := e.do(t, "GET", "/api/search?q=oak", sampleapi.DemoFreeKey, "")
		b := decode[searchBody](t, w)
		if w.Code != 200 || w.Header().Get(httplimit.HeaderDegraded) != "free-search" || !b.Degraded || !b.Cached || b.Reduced || len(b.Items) != 20 {
			t.Errorf("cached: status %d header %q body degraded=%v cached=%v reduced=%v items=%d",
				w.Code, w.Header().Get(httplimit.HeaderDegraded), b.Degraded, b.Cached, b.Reduced, len(b.Items))
		}
		w = e.do(t, "GET", "/api/search?q=copper", sampleapi.DemoFreeKey, "")
		b = decode[searchBody](t, w)
		if w.Code != 200 || !b.Degraded || b.Cached || !b.Reduced || len(b.Items) == 0 || len(b.Items) > 5 {
			t.Errorf("reduced: status %d body degraded=%v cached=%v reduced=%v items=%d", w.Code, b.Degraded, b.Cached, b.Reduced, len(b.Items))
		}
	})
}

func TestReports(t *testing.T) {
	e := newEnv(t, sampleapi.Options{JobDuration: 2 * time.Second})
	start := e.clock.Now().UTC()
	// The anonymous plan's reports tier: 6 per minute (one every 10 s) with
	// two waiting: the job waits, not the connection.
	steps := []struct {
		wantCode   int
		wantDelay  string
		wantStatus string
		wantStart  time.Time
	}{
		{202, "", "running", start},
		{202, "10000", "queued", start.Add(10 * time.Second)},
		{202, "20000", "queued", start.Add(20 * time.Second)},
		{429, "", "", time.Time{}},
	}
	var urls []string
	for i, s := range steps {
		w := e.do(t, "POST", "/api/reports", "", `{"query":"lantern"}`)
		if w.Code != s.wantCode || w.Header().Get(httplimit.HeaderQueueDelay) != s.wantDelay {
			t.Fatalf("report %d: status %d delay %q, want %d %q", i, w.Code, w.Header().Get(httplimit.HeaderQueueDelay), s.wantCode, s.wantDelay)
		}
		if s.wantCode != 202 {
			continue
		}
		b := decode[jobBody](t, w)
		if w.Header().Get("Location") != b.StatusURL || b.StatusURL != "/api/jobs/"+b.ID || len(b.ID) != 24 ||
			b.Status != s.wantStatus || !b.StartsAt.Equal(s.wantStart) || !b.CreatedAt.Equal(start) || b.Query != "lantern" || b.Result != nil {
			t.Errorf("report %d: Location %q body %+v", i, w.Header().Get("Location"), b)
		}
		urls = append(urls, b.StatusURL)
	}

	t.Run("JobProgressesAndFinishes", func(t *testing.T) {
		progress := []struct {
			advance    time.Duration
			wantStatus string
		}{
			{0, "queued"}, {10 * time.Second, "running"}, {2 * time.Second, "done"},
		}
		for _, p := range progress {
			e.clock.Advance(p.advance)
			w := e.do(t, "GET", urls[1], "", "")
			b := decode[jobBody](t, w)
			if w.Code != 200 || b.Status != p.wantStatus || (b.Result != nil) != (p.wantStatus == "done") {
				t.Errorf("after +%s: status %d body %+v", p.advance, w.Code, b)
			}
			if b.Result != nil && (b.Result.Items == 0 || b.Result.AveragePriceCents < 500) {
				t.Errorf("result %+v", *b.Result)
			}
		}
	})
	t.Run("OtherCallersJobIs404", func(t *testing.T) {
		if w := e.do(t, "GET", urls[0], sampleapi.DemoProKey, ""); w.Code != 404 {
			t.Errorf("status %d", w.Code)
		}
		if w := e.do(t, "GET", "/api/jobs/doesnotexist", "", ""); w.Code != 404 {
			t.Errorf("unknown job: status %d", w.Code)
		}
	})
	t.Run("BadBodies", func(t *testing.T) {
		cases := []struct {
			name, body string
			wantCode   int
			wantError  string
		}{
			{"NotJSON", "query=x", 400, "invalid_body"},
			{"UnknownField", `{"kind":"x"}`, 400, "invalid_body"},
			{"QueryTooLong", `{"query":"` + strings.Repeat("x", 201) + `"}`, 400, "invalid_query"},
			{"TooLarge", `{"query":"` + strings.Repeat("x", 20000) + `"}`, 413, "body_too_large"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				w := e.do(t, "POST", "/api/reports", sampleapi.DemoProKey, tc.body)
				if b := decode[errorBody](t, w); w.Code != tc.wantCode || b.Error != tc.wantError {
					t.Errorf("status %d body %+v", w.Code, b)
				}
			})
		}
	})
}

func TestJobTableIsBounded(t *testing.T) {
	e := newEnv(t, sampleapi.Options{MaxJobs: 2, JobDuration: time.Second})
	for i := range 2 {
		if w := e.do(t, "POST", "/api/reports", sampleapi.DemoProKey, ""); w.Code != 202 {
			t.Fatalf("job %d: %d", i, w.Code)
		}
	}
	w := e.do(t, "POST", "/api/reports", sampleapi.DemoProKey, "")
	if b := decode[errorBody](t, w); w.Code != 503 || b.Error != "too_many_jobs" || w.Header().Get("Retry-After") == "" {
		t.Errorf("full table: status %d body %+v", w.Code, b)
	}
	e.clock.Advance(10 * time.Second)
	if w := e.do(t, "POST", "/api/reports", sampleapi.DemoProKey, ""); w.Code != 202 {
		t.Errorf("after jobs finished: status %d", w.Code)
	}
}

func TestRateLimitStatus(t *testing.T) {
	e := newEnv(t, sampleapi.Options{})
	e.do(t, "GET", "/api/search?q=oak", sampleapi.DemoProKey, "")
	for range 2 {
		w := e.do(t, "GET", "/api/rate-limit-status", sampleapi.DemoProKey, "")
		b := decode[httplimit.StatusBody](t, w)
		if w.Code != 200 || b.Plan != "pro" || len(b.Limits) != 3 {
			t.Fatalf("status %d body %+v", w.Code, b)
		}
		want := []struct {
			policy    string
			remaining int64
		}{{"pro-global", 499}, {"pro-search", 19}, {"pro-reports", 11}}
		for i, l := range b.Limits {
			if l.Policy != want[i].policy || l.Remaining != want[i].remaining {
				t.Errorf("limit %d: %s remaining %d, want %s %d", i, l.Policy, l.Remaining, want[i].policy, want[i].remaining)
			}
		}
	}
}

func TestAnonymousSubject(t *testing.T) {
	cases := []struct{ in, want string }{
		{"203.0.113.9", "ip:203.0.113.9"},
		{"2001:db8:1:2:3:4:5:6", "ip:2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "ip:2001:db8:1:2::/64"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			r := sampleapi.NewDemoResolver()
			c := r.Anonymous(mustAddr(t, tc.in))
			if c.Subject != tc.want || c.Plan != sampleapi.PlanAnonymous || len(c.Limits) != 3 {
				t.Errorf("caller %+v", c)
			}
		})
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
