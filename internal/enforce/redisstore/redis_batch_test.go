package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/failover"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

func TestCoalesceGroupsIdenticalAllowCalls(t *testing.T) {
	// The store hands out one *limitArgs per distinct limit.
	limits := map[string]*limitArgs{}
	call := func(mode, subject, field string) *redisCall {
		if limits[field] == nil {
			limits[field] = &limitArgs{kind: enforce.KindFixedWindow, field: field, args: [8]any{field, enforce.CodeFixedWindow, int64(10), int64(60e6), int64(0), int64(1), "fw:60000000:10:0", int64(0)}}
		}
		return &redisCall{keys: []string{"t:{" + subject + "}"}, mode: mode, limits: []*limitArgs{limits[field]}}
	}
	a1, a2, a3 := call("a", "key:1", "fw:fw:60000000:10"), call("a", "key:1", "fw:fw:60000000:10"), call("a", "key:1", "fw:fw:60000000:10")
	other := call("a", "key:2", "fw:fw:60000000:10")
	otherLimit := call("a", "key:1", "fw2:fw:60000000:10")
	otherClock := call("a", "key:1", "fw:fw:60000000:10")
	otherClock.now = "1000"
	p1, p2 := call("p", "key:1", "fw:fw:60000000:10"), call("p", "key:1", "fw:fw:60000000:10")
	w := newBatcher(8)
	leaders := w.coalesce([]*redisCall{a1, p1, a2, other, otherLimit, p2, a3, otherClock})
	cases := []struct {
		name      string
		call      *redisCall
		wantCount int
		wantGroup []*redisCall // the calls deciding in call's request
	}{
		{"IdenticalAllowCallsShareOne", a1, 3, []*redisCall{a1, a3, a2}},
		{"PeekIsNeverCoalesced", p1, 1, []*redisCall{p1}},
		{"OtherSubjectRunsAlone", other, 1, []*redisCall{other}},
		{"OtherLimitsRunAlone", otherLimit, 1, []*redisCall{otherLimit}},
		{"SecondPeekNeither", p2, 1, []*redisCall{p2}},
		{"OtherClockRunsAlone", otherClock, 1, []*redisCall{otherClock}},
	}
	// Requests go out in the order of their first call.
	if len(leaders) != len(cases) {
		t.Fatalf("coalesce made %d requests of 8, want %d", len(leaders), len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if leaders[i] != tc.call {
				t.Fatalf("request %d is not the expected leader", i)
			}
			if tc.call.count != tc.wantCount {
				t.Errorf("count = %d, want %d", tc.call.count, tc.wantCount)
			}
			var group []*redisCall
			for c := tc.call; c != nil; c = c.next {
				group = append(group, c)
			}
			if len(group) != len(tc.wantGroup) {
				t.Fatalf("group of %d calls, want %d", len(group), len(tc.wantGroup))
			}
			for j := range group {
				if group[j] != tc.wantGroup[j] {
					t.Errorf("group member %d differs", j)
				}
			}
		})
	}
	t.Run("ScriptCallsSplitWhereTheClockChanges", func(t *testing.T) {
		want := []script{{0, 5}, {5, 6}}
		if got := w.group(leaders, false); !slices.Equal(got, want) {
			t.Errorf("group = %v, want %v", got, want)
		}
		want = []script{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}}
		if got := w.group(leaders, true); !slices.Equal(got, want) {
			t.Errorf("group, one request per script = %v, want %v", got, want)
		}
	})
}

// runTogether decides reqs as the pipeline worker does a batch that holds
// them all, and returns each one's reply or error.
func runTogether(t *testing.T, store *Store, reqs []enforce.Request, consume []bool) ([][]int64, []error) {
	t.Helper()
	calls := make([]*redisCall, len(reqs))
	for i, req := range reqs {
		c, err := store.prepare(req, consume[i], store.clock())
		if err != nil {
			t.Fatal(err)
		}
		calls[i] = c
	}
	var pc *pipeConn // as the store's workers send: over their own connection when it has them
	if store.direct != nil {
		pc = newPipeConn(store.direct, store.timeout)
		defer pc.close()
	}
	store.run(calls, newBatcher(len(calls)), pc)
	replies, errs := make([][]int64, len(calls)), make([]error, len(calls))
	for i, c := range calls {
		<-c.done
		replies[i], errs[i] = slices.Clone(c.reply), c.err
	}
	return replies, errs
}

// TestCoalescedScriptCallDecidesAsCallsInARow runs k Allow requests as one
// coalesced request on one subject and as k requests on another, on the
// same clock, for every algorithm and with rejections among them: the
// replies must be identical.
func TestCoalescedScriptCallDecidesAsCallsInARow(t *testing.T) {
	const k = 14
	for _, limits := range [][]enforce.Limit{
		{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute}},
		{{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: 10, Window: time.Minute}},
		{{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 10, Window: time.Minute, Cost: 2}},
		{{Name: "lb", Algorithm: enforce.LeakyBucket, Limit: 10, Window: time.Minute, Burst: 5, Mode: enforce.ModeQueue}},
		everyAlgorithm(),
		{everyAlgorithm()[2], {Name: "small", Algorithm: enforce.FixedWindow, Limit: 3, Window: time.Minute}},
	} {
		t.Run(fmt.Sprintf("%s/%dLayers", limits[0].Algorithm, len(limits)), func(t *testing.T) {
			client, prefix := storetest.Redis(t)
			clock := storetest.NewClock()
			store := newTestRedisStore(t, client, Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second, DisableUsage: true})
			reqs, consume := make([]enforce.Request, k), make([]bool, k)
			for j := range k {
				reqs[j], consume[j] = enforce.Request{Subject: "key:coalesced", Limits: limits}, true
			}
			together, errs := runTogether(t, store, reqs, consume)
			var got, want []int64
			for j := range k {
				if errs[j] != nil {
					t.Fatal(errs[j])
				}
				// the coalesced callers are signalled in chain order, not
				// arrival order, so compare the sequence of decisions
				got = append(got, together[j]...)
				one, errs := runTogether(t, store, []enforce.Request{{Subject: "key:one-by-one", Limits: limits}}, []bool{true})
				if errs[0] != nil {
					t.Fatal(errs[0])
				}
				want = append(want, one[0]...)
			}
			sortReplies(got, len(got)/k)
			sortReplies(want, len(want)/k)
			if !slices.Equal(got, want) {
				t.Errorf("coalesced replies %v,\none by one %v", got, want)
			}
		})
	}
}

// sortReplies sorts a run of replies of per values each, so two runs that
// handed the same decisions to callers in another order compare equal.
func sortReplies(values []int64, per int) {
	rows := make([][]int64, 0, len(values)/per)
	for i := 0; i < len(values); i += per {
		rows = append(rows, slices.Clone(values[i:i+per]))
	}
	slices.SortFunc(rows, slices.Compare)
	values = values[:0]
	for _, r := range rows {
		values = append(values, r...)
	}
}

// TestBatchedScriptCallDecidesAsSeparateCalls is a differential test of
// batching: random rounds of requests (Allow and Peek, every algorithm, one
// to three layers, several routes of a subject, identical concurrent calls)
// are decided in one script call by one store and one request at a time by
// another, on the same controlled clock; every reply must match.
func TestBatchedScriptCallDecidesAsSeparateCalls(t *testing.T) {
	client, prefix := storetest.Redis(t)
	clock := storetest.NewClock()
	batched := newTestRedisStore(t, client, Options{Prefix: prefix + "b:", Now: clock.Now, Timeout: 2 * time.Second, DisableUsage: true})
	serial := newTestRedisStore(t, client, Options{Prefix: prefix + "s:", Now: clock.Now, Timeout: 2 * time.Second, DisableUsage: true})
	small := []enforce.Limit{
		{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 4, Window: 10 * time.Second},
		{Name: "log", Algorithm: enforce.SlidingWindowLog, Limit: 5, Window: 10 * time.Second, Cost: 2},
		{Name: "swc", Algorithm: enforce.SlidingWindowCounter, Limit: 6, Window: 10 * time.Second},
		{Name: "tb", Algorithm: enforce.TokenBucket, Limit: 3, Window: 5 * time.Second, Burst: 4},
		{Name: "lb", Algorithm: enforce.LeakyBucket, Limit: 3, Window: 5 * time.Second, Burst: 2, Mode: enforce.ModeQueue},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Each subject has two routes whose limit sets differ; the second shares
	// the first's leading limit, as an endpoint tier shares the plan's limit.
	routes := map[string][2][]enforce.Limit{}
	subjects := []string{"key:a", "key:b", "key:c", "key:d"}
	for _, s := range subjects {
		first := rng.IntN(len(small))
		a := []enforce.Limit{small[first]}
		b := []enforce.Limit{small[first], small[(first+1+rng.IntN(len(small)-1))%len(small)]}
		if rng.IntN(2) == 0 {
			a = append(a, small[(first+2)%len(small)])
		}
		routes[s] = [2][]enforce.Limit{a, b}
	}
	decisions := 0
	for round := range 60 {
		clock.Set(clock.Now().Add(time.Duration(rng.IntN(1500)) * time.Millisecond))
		// At most one route per subject in a round: requests of one subject
		// on different routes may be reordered by coalescing, as concurrent
		// requests may be, which would make the serial replay's order
		// ambiguous.
		var reqs []enforce.Request
		var consume []bool
		for _, s := range subjects {
			route := rng.IntN(2)
			for range rng.IntN(4) {
				reqs = append(reqs, enforce.Request{Subject: s, Route: fmt.Sprint("GET /", route), Limits: routes[s][route]})
				consume = append(consume, rng.IntN(5) > 0)
			}
		}
		rng.Shuffle(len(reqs), func(i, j int) {
			reqs[i], reqs[j] = reqs[j], reqs[i]
			consume[i], consume[j] = consume[j], consume[i]
		})
		if len(reqs) == 0 {
			continue
		}
		got, gotErrs := runTogether(t, batched, reqs, consume)
		// The serial replay decides each subject's requests in the order the
		// batch did: peeks where they stood, a coalesced group's Allow calls
		// together at its first call.
		order := batchOrder(reqs, consume)
		want, wantErrs := make([][]int64, len(reqs)), make([]error, len(reqs))
		for _, i := range order {
			r, e := runTogether(t, serial, reqs[i:i+1], consume[i:i+1])
			want[i], wantErrs[i] = r[0], e[0]
		}
		for i := range reqs {
			decisions++
			if gotErrs[i] != nil || wantErrs[i] != nil {
				t.Fatalf("round %d, request %d: batched error %v, serial error %v", round, i, gotErrs[i], wantErrs[i])
			}
		}
		// Coalesced callers of one group may receive the group's decisions
		// in another order than the serial replay's, so compare each
		// subject's decisions as a sorted whole.
		for _, s := range subjects {
			var g, w []int64
			per := 0
			for i := range reqs {
				if reqs[i].Subject == s && consume[i] {
					g, w = append(g, got[i]...), append(w, want[i]...)
					per = len(got[i])
				} else if reqs[i].Subject == s && !slices.Equal(got[i], want[i]) {
					t.Errorf("round %d: peek of %s: batched %v, serial %v", round, s, got[i], want[i])
				}
			}
			if per > 0 {
				sortReplies(g, per)
				sortReplies(w, per)
			}
			if !slices.Equal(g, w) {
				t.Errorf("round %d: %s: batched %v,\nserial %v", round, s, g, w)
			}
		}
	}
	t.Logf("%d decisions compared", decisions)
}

// TestBatchedScriptCallIsolatesAFailingRequest: a request whose Redis
// command fails (its subject's key holds a string) gets that error, alone
// or in a batch, and the others in its batch are decided all the same. On a
// private redis-server: miniredis fails the whole script instead.
func TestBatchedScriptCallIsolatesAFailingRequest(t *testing.T) {
	srv := startPrivateRedis(t)
	client := srv.client()
	store := newTestRedisStore(t, client, Options{Prefix: "t:", Timeout: 2 * time.Second, DisableUsage: true})
	ctx := context.Background()
	if err := client.Set(ctx, "t:{key:wrongtype}", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	limits := everyAlgorithm()
	bad := enforce.Request{Subject: "key:wrongtype", Limits: limits}
	good := func(i int) enforce.Request { return enforce.Request{Subject: fmt.Sprint("key:", i), Limits: limits} }
	for _, tc := range []struct {
		name string
		reqs []enforce.Request
	}{
		{"Alone", []enforce.Request{bad}},
		{"First", []enforce.Request{bad, good(1), good(2)}},
		{"Between", []enforce.Request{good(3), bad, good(4)}},
		{"Last", []enforce.Request{good(5), good(6), bad}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			consume := make([]bool, len(tc.reqs))
			for i := range consume {
				consume[i] = true
			}
			replies, errs := runTogether(t, store, tc.reqs, consume)
			for i, req := range tc.reqs {
				if req.Subject == bad.Subject {
					if errs[i] == nil || !strings.Contains(errs[i].Error(), "WRONGTYPE") || errors.Is(errs[i], enforce.ErrStoreUnavailable) {
						t.Errorf("request on a key of the wrong type: error %v, want the WRONGTYPE script error", errs[i])
					}
					continue
				}
				if errs[i] != nil {
					t.Fatalf("%s: %v", req.Subject, errs[i])
				}
				if len(replies[i]) != 3+4*len(limits) || replies[i][0] != 1 {
					t.Errorf("%s: reply %v, want an admission of %d limits", req.Subject, replies[i], len(limits))
				}
				d, err := store.Peek(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if got := d.Layers[0].Remaining; got != limits[0].Limit-1 {
					t.Errorf("%s: remaining %d after one admission, want %d", req.Subject, got, limits[0].Limit-1)
				}
			}
		})
	}
}

// batchOrder is the order in which one script call decides reqs: requests in
// the order of their first call, a coalesced group (identical Allow calls)
// wholly at its first call.
func batchOrder(reqs []enforce.Request, consume []bool) []int {
	var order []int
	done := make([]bool, len(reqs))
	for i := range reqs {
		if done[i] {
			continue
		}
		order, done[i] = append(order, i), true
		if !consume[i] {
			continue
		}
		for j := i + 1; j < len(reqs); j++ {
			if !done[j] && consume[j] && reqs[j].Subject == reqs[i].Subject && slices.Equal(reqs[j].Limits, reqs[i].Limits) {
				order, done[j] = append(order, j), true
			}
		}
	}
	return order
}

func TestRedisStoreNegativeCache(t *testing.T) {
	strict := enforce.Limit{Name: "strict", Algorithm: enforce.FixedWindow, Limit: 1, Window: 10 * time.Second}
	queued := enforce.Limit{Name: "queued", Algorithm: enforce.LeakyBucket, Limit: 1, Window: 10 * time.Second, Mode: enforce.ModeQueue}
	raised := strict
	raised.Limit = 5
	cases := []struct {
		name       string
		limits     []enforce.Limit
		route      string // of the request made while Redis is down
		later      []enforce.Limit
		at         time.Duration // when that request is made
		wantCached bool
	}{
		{name: "RepeatsRejectionWithoutRedis", limits: []enforce.Limit{strict}, route: "GET /a", later: []enforce.Limit{strict}, at: 4 * time.Second, wantCached: true},
		{name: "ExpiresWithRetryAfter", limits: []enforce.Limit{strict}, route: "GET /a", later: []enforce.Limit{strict}, at: 10 * time.Second},
		{name: "OtherRouteMisses", limits: []enforce.Limit{strict}, route: "GET /b", later: []enforce.Limit{strict}, at: time.Second},
		{name: "ChangedLimitMisses", limits: []enforce.Limit{strict}, route: "GET /a", later: []enforce.Limit{raised}, at: time.Second},
		{name: "QueueModeIsNeverCached", limits: []enforce.Limit{queued}, route: "GET /a", later: []enforce.Limit{queued}, at: time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startPrivateRedis(t)
			clock := storetest.NewClock()
			store := newTestRedisStore(t, srv.client(), Options{Prefix: "t:", Now: clock.Now, Timeout: 200 * time.Millisecond, NegativeCacheSize: 10})
			ctx := context.Background()
			req := enforce.Request{Subject: "key:1", Route: "GET /a", Limits: tc.limits}
			if d, err := store.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("first request: %+v, %v; want admitted", d, err)
			}
			rejected, err := store.Allow(ctx, req)
			if err != nil || rejected.Allowed {
				t.Fatalf("second request: %+v, %v; want rejected", rejected, err)
			}
			srv.stop()
			clock.Set(storetest.Epoch.Add(tc.at))
			d, err := store.Allow(ctx, enforce.Request{Subject: "key:1", Route: tc.route, Limits: tc.later})
			if !tc.wantCached {
				if !errors.Is(err, enforce.ErrStoreUnavailable) {
					t.Fatalf("Allow = %+v, %v; want a Redis call failing with ErrStoreUnavailable", d, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Allow = %v; want the cached rejection", err)
			}
			want := rejected.Layers[0]
			want.RetryAfter -= tc.at
			want.ResetAfter -= tc.at
			if d.Allowed || len(d.Layers) != 1 || d.Layers[0] != want {
				t.Errorf("cached decision = %+v, want rejected with %+v", d, want)
			}
		})
	}
}

func TestNewRedisStoreRefusesABracedPrefix(t *testing.T) {
	client, _ := storetest.Redis(t)
	if s, err := New(client, Options{Prefix: "app:{x}:"}); err == nil {
		s.Close()
		t.Fatal("NewRedisStore accepted a prefix with a hash tag of its own")
	}
}

func TestRedisStoreWritesUsageForOtherInstances(t *testing.T) {
	limits := []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour}}
	ctx := context.Background()
	// admitOneRejectOne makes one admitted and one rejected decision.
	admitOneRejectOne := func(t *testing.T, s *Store, subject string) {
		t.Helper()
		for range 2 {
			if _, err := s.Allow(ctx, enforce.Request{Subject: subject, Route: "GET /a", Limits: limits}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// readUsage reads subject's usage through another instance.
	readUsage := func(t *testing.T, reader *Store, subject string) (admitted, rejected int64) {
		t.Helper()
		points, err := reader.Usage(ctx, []string{subject}, time.Now().Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range points {
			admitted += p.Admitted
			rejected += p.Rejected
		}
		return admitted, rejected
	}
	cases := []struct {
		name  string
		flush time.Duration
		close bool // close the writer instead of waiting for its flush
	}{
		{name: "EveryFlushInterval", flush: 20 * time.Millisecond},
		{name: "OnClose", flush: time.Hour, close: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, prefix := storetest.Redis(t)
			writer := newTestRedisStore(t, client, Options{Prefix: prefix, Timeout: 2 * time.Second, UsageFlush: tc.flush})
			reader := newTestRedisStore(t, storetest.InstanceClient(t), Options{Prefix: prefix, Timeout: 2 * time.Second})
			admitOneRejectOne(t, writer, "key:1")
			if tc.close {
				writer.Close()
			}
			var admitted, rejected int64
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if admitted, rejected = readUsage(t, reader, "key:1"); admitted+rejected == 2 {
					break
				}
			}
			if admitted != 1 || rejected != 1 {
				t.Errorf("another instance reads admitted %d, rejected %d; want 1 and 1", admitted, rejected)
			}
		})
	}
	t.Run("KeptWhileRedisIsDown", func(t *testing.T) {
		srv := startPrivateRedis(t)
		store := newTestRedisStore(t, srv.client(), Options{Prefix: "t:", Timeout: 500 * time.Millisecond, UsageFlush: time.Hour})
		admitOneRejectOne(t, store, "key:1")
		srv.stop()
		if err := store.flushUsage(ctx); !errors.Is(err, enforce.ErrStoreUnavailable) {
			t.Fatalf("flush with Redis down = %v, want ErrStoreUnavailable", err)
		}
		if err := srv.start(); err != nil {
			t.Fatal(err)
		}
		var err error
		for range 20 { // the pool may hold connections to the dead server
			if err = store.flushUsage(ctx); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("flush after restart: %v", err)
		}
		reader := newTestRedisStore(t, srv.client(), Options{Prefix: "t:", Timeout: 500 * time.Millisecond})
		if admitted, rejected := readUsage(t, reader, "key:1"); admitted != 1 || rejected != 1 {
			t.Errorf("after the restart: admitted %d, rejected %d; want the 1 and 1 counted while down", admitted, rejected)
		}
	})
}

// TestAllowIntoReusesTheCallersLayers: the Redis store, alone and behind a
// FailoverStore, decides into the slice it is given when it is large
// enough, with the same decision Allow makes, and allocates a fresh one when
// it is not.
func TestAllowIntoReusesTheCallersLayers(t *testing.T) {
	client, prefix := storetest.Redis(t)
	clock := storetest.NewClock()
	rs := newTestRedisStore(t, client, Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second})
	limits := everyAlgorithm()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		store enforce.LayersAllower
	}{
		{"RedisStore", rs},
		{"FailoverStore", failover.New(rs, failover.Options{Timeout: 2 * time.Second})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]enforce.LayerResult, 0, len(limits))
			for i := range 3 {
				into, err := tc.store.AllowInto(ctx, enforce.Request{Subject: tc.name + ":into", Limits: limits}, buf)
				if err != nil {
					t.Fatal(err)
				}
				if &into.Layers[0] != &buf[:1][0] {
					t.Fatalf("decision %d: layers not written into the given slice", i)
				}
				plain, err := rs.Allow(ctx, enforce.Request{Subject: tc.name + ":plain", Limits: limits})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(into.Layers, plain.Layers) || into.Allowed != plain.Allowed {
					t.Fatalf("decision %d: AllowInto %+v, Allow %+v", i, into, plain)
				}
			}
			small, err := tc.store.AllowInto(ctx, enforce.Request{Subject: tc.name + ":small", Limits: limits}, make([]enforce.LayerResult, 0, 1))
			if err != nil {
				t.Fatal(err)
			}
			if len(small.Layers) != len(limits) {
				t.Errorf("with too small a slice: %d layers, want %d", len(small.Layers), len(limits))
			}
		})
	}
}
