package adminapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/playground"
)

// countingWriter is a ResponseWriter that keeps only the status and the
// number of body bytes, so measuring a response does not itself hold it.
type countingWriter struct {
	header http.Header
	status int
	bytes  int
	head   []byte // the first bytes, to decode small answers
}

func (c *countingWriter) Header() http.Header { return c.header }
func (c *countingWriter) WriteHeader(s int)   { c.status = s }
func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if len(c.head) < 1<<20 {
		c.head = append(c.head, p[:min(len(p), 1<<20-len(c.head))]...)
	}
	c.bytes += len(p)
	return len(p), nil
}

// issue30Playground is the request of issue 30's finding: ten tiers over
// two arrivals a day apart (the longest span replayed), every algorithm.
func issue30Playground() string {
	var tiers []string
	for i := range 10 {
		tiers = append(tiers, fmt.Sprintf(`{"name":"t%d","algorithm":"fixed_window","limit":10,"window_seconds":60}`, i))
	}
	return `{"tiers":[` + strings.Join(tiers, ",") + `],"arrivals":[` +
		`{"at":"2026-01-01T00:00:00Z","subject":"a"},{"at":"2026-01-01T23:59:59Z","subject":"a"}]}`
}

// TestPlaygroundAnswerBounded: the small request that answered 121 MB of
// JSON now answers under 1 MiB, and serving it allocates under 16 MiB in
// all (counted by the runtime, not timed), whatever the span: each series
// has at most MaxSeriesPoints points.
func TestPlaygroundAnswerBounded(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	body := issue30Playground()
	if len(body) > 1000 {
		t.Fatalf("the request is %d bytes; the finding's was about 700", len(body))
	}
	h := New(Deps{Plans: e.plans, Keys: e.keys, Tokens: e.tokens, Store: e.store, Pool: e.pool, Logger: slog.New(slog.DiscardHandler)})
	serve := func() *countingWriter {
		req := httptest.NewRequestWithContext(context.Background(), "POST", Prefix+"/playground", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		w := &countingWriter{header: http.Header{}}
		h.ServeHTTP(w, req)
		return w
	}
	serve() // warm up: the first request loads what every request shares
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := serve()
	runtime.ReadMemStats(&after)
	if w.status != http.StatusOK {
		t.Fatalf("status %d: %s", w.status, w.head)
	}
	t.Logf("answered %d bytes; serving allocated %d bytes", w.bytes, after.TotalAlloc-before.TotalAlloc)
	if w.bytes > 1<<20 {
		t.Errorf("answered %d bytes, want at most 1 MiB", w.bytes)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("serving the replay allocated %d bytes, want at most 16 MiB", alloc)
	}
	var rep playground.Report
	if err := json.Unmarshal(w.head, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 50 || rep.Seconds != 86400 || rep.Step != 288 {
		t.Fatalf("%d runs over %d s in steps of %d; want 50 over 86400 in steps of 288", len(rep.Runs), rep.Seconds, rep.Step)
	}
	for _, run := range rep.Runs {
		admitted := 0
		for _, p := range run.Series {
			admitted += p.Admitted
		}
		if len(run.Series) != playground.MaxSeriesPoints || admitted != 2 || run.Series[0].Admitted != 1 || run.Series[299].Admitted != 1 {
			t.Fatalf("run %s/%s: %d points admitting %d, want %d admitting 1 first and 1 last",
				run.Tier, run.Algorithm, len(run.Series), admitted, playground.MaxSeriesPoints)
		}
	}
}

// busyReplayer is a playground whose every slot is taken.
type busyReplayer struct{}

func (busyReplayer) Replay(context.Context, playground.Scenario) (playground.Report, error) {
	return playground.Report{}, playground.ErrBusy
}

// TestPlaygroundBusy: when the replays running at once are at their bound,
// a replay is answered 503 with Retry-After, not queued.
func TestPlaygroundBusy(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	e.srv.Config.Handler = New(Deps{Plans: e.plans, Keys: e.keys, Tokens: e.tokens, Store: e.store, Pool: e.pool,
		Logger: slog.New(slog.DiscardHandler), Playground: busyReplayer{}})
	res := e.do("POST", Prefix+"/playground", token, map[string]any{"preset": "steady"})
	if p := res.problem(t); res.status != http.StatusServiceUnavailable || res.header.Get("Retry-After") != "1" || p.Type != typeUnavailable {
		t.Fatalf("%d %v %s", res.status, res.header, res.body)
	}
}
