package history_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/testenv"
)

type oneKey struct{ caller enforce.Caller }

func (o oneKey) ResolveKey(secret string) (enforce.Caller, error) {
	if secret != "sk_agree" {
		return enforce.Caller{}, fmt.Errorf("test: %w", enforce.ErrInvalidKey)
	}
	return o.caller, nil
}

func (o oneKey) Anonymous(netip.Addr) enforce.Caller { return enforce.Caller{} }

// TestLiveCountersAndHistoryAgree: the figures people read come from two
// places, the store's usage series (the live counters, the overview, the
// developer's chart) and the history in Postgres (the history pages and
// their CSV). After mixed traffic (admissions, refusals by a rate tier,
// refusals by a concurrency tier, a shadow tier that would refuse) both
// count the same decisions.
func TestLiveCountersAndHistoryAgree(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	rec := history.NewRecorder(pool, history.Options{})
	store := memstore.New(memstore.Options{})
	caller := enforce.Caller{Subject: "dev:77", Key: "key:770", KeyID: 770, UserID: 77, Plan: "mixed", Limits: []enforce.Limit{
		{Name: "plan", Algorithm: enforce.FixedWindow, Limit: 8, Window: time.Hour},
		{Name: "slots", Route: "GET /x", Algorithm: enforce.Concurrency, Limit: 1},
		{Name: "trial", Algorithm: enforce.FixedWindow, Limit: 2, Window: time.Hour, Mode: enforce.ModeShadow},
	}}
	mw := httplimit.NewMiddleware(store, oneKey{caller}, httplimit.Options{Record: rec, Shadow: rec})
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.Handle("GET /x", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case entered <- struct{}{}:
			<-release
		default:
		}
	})))
	do := func() int {
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("Authorization", "Bearer sk_agree")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec.Code
	}
	codes := map[int]int{}
	held := make(chan int)
	go func() { held <- do() }()
	<-entered
	for range 3 { // the one slot is held: refused by the concurrency tier
		codes[do()]++
	}
	close(release)
	codes[<-held]++
	entered <- struct{}{} // later requests do not block
	for range 10 {        // 7 more fit the plan's 8; 3 are refused by the rate tier
		codes[do()]++
	}
	if codes[http.StatusOK] != 8 || codes[http.StatusTooManyRequests] != 6 {
		t.Fatalf("answers %v, want 8 admitted and 6 refused", codes)
	}

	// The live counters' source.
	pts, err := store.Usage(ctx, []string{"dev:77"}, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var liveAdmitted, liveRejected int64
	for _, p := range pts {
		liveAdmitted += p.Admitted
		liveRejected += p.Rejected
	}
	// The history's.
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	series, err := history.NewReader(pool).Series(ctx, history.Filter{UserID: 77}, history.Minute, time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var histAdmitted, histRejected int64
	for _, p := range series {
		histAdmitted += p.Admitted
		histRejected += p.Rejected
	}
	if liveAdmitted != 8 || liveRejected != 6 || histAdmitted != 8 || histRejected != 6 {
		t.Fatalf("live counters %d admitted / %d rejected, history %d / %d; want 8 / 6 in both", liveAdmitted, liveRejected, histAdmitted, histRejected)
	}
	// The shadow tier would have refused 6 of the 8 admitted (its limit
	// is 2), none of the 6 the enforced tiers refused.
	shadow, err := history.NewReader(pool).Shadow(ctx, "mixed", time.Now(), 10)
	if err != nil {
		t.Fatal(err)
	}
	var would int64
	for _, s := range shadow {
		would += s.LastHour
	}
	if would != 6 {
		t.Errorf("shadow rows say %d would-be refusals (%+v), want 6", would, shadow)
	}
}
