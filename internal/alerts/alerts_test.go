package alerts_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
)

// dailyWindow is a fixed window of a day: the tests' traffic never
// straddles its end unless run at midnight UTC.
var dailyWindow = plans.LimitInput{Name: "global", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 86400}

func TestWebhookOncePerCrossingWithRetry(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			f := newFixture(t, testenv.Postgres(t), dailyWindow)
			var store enforce.Store
			if backend == "memory" {
				frozen := time.Now()
				store = memstore.New(memstore.Options{Now: func() time.Time { return frozen }})
			} else {
				client, prefix := testenv.Redis(t)
				testenv.RealRedis(t, "the rate-limit script")
				rs, err := redisstore.New(client, redisstore.Options{Prefix: prefix, DisableUsage: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = rs.Close() })
				store = rs
			}
			ctx := context.Background()
			// The first attempt of the first event fails with a 500.
			rcv := newReceiver(t, 500)
			hook, secret, err := f.svc.CreateWebhook(ctx, f.dev.ID, rcv.srv.URL+"/hooks")
			if err != nil {
				t.Fatal(err)
			}
			rcv.secret = []byte(secret)
			if _, err := f.svc.SaveRule(ctx, f.dev.ID, nil, []int32{80, 100}, false, false); err != nil {
				t.Fatal(err)
			}
			ev := f.evaluator(f.pool, store, false)
			w, err := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{Dialer: receiverDialer(), RetryBase: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}

			f.spend(store, 7)
			if n := f.evaluate(ev); n != 0 {
				t.Fatalf("at 70%%: fired %d, want 0", n)
			}
			f.spend(store, 1)
			if n := f.evaluate(ev); n != 1 {
				t.Fatalf("at 80%%: fired %d, want 1", n)
			}
			if n := f.evaluate(ev); n != 0 {
				t.Fatalf("at 80%% again: fired %d, want 0", n)
			}
			drain(t, f.pool, w)
			f.spend(store, 1)
			if n := f.evaluate(ev); n != 0 {
				t.Fatalf("at 90%%: fired %d, want 0", n)
			}
			f.spend(store, 1)
			if n := f.evaluate(ev); n != 1 {
				t.Fatalf("at 100%%: fired %d, want 1", n)
			}
			// Rejected traffic past the limit fires nothing more.
			if d, _ := store.Allow(ctx, f.request()); d.Allowed {
				t.Fatal("11th request admitted")
			}
			for range 3 {
				if n := f.evaluate(ev); n != 0 {
					t.Fatalf("past 100%%: fired %d, want 0", n)
				}
			}
			drain(t, f.pool, w)

			calls := rcv.snapshot()
			var got []string
			for _, c := range calls {
				got = append(got, c.event.Type+":"+strconv.Itoa(c.event.ThresholdPercent)+":"+strconv.Itoa(c.status))
			}
			want := []string{"threshold.crossed:80:500", "threshold.crossed:80:200", "threshold.crossed:100:200"}
			if !slices.Equal(got, want) {
				t.Fatalf("receiver got %v, want %v", got, want)
			}
			if calls[0].event.ID != calls[1].event.ID || calls[0].delivery != calls[1].delivery {
				t.Errorf("the retry is not the same event and delivery: %+v %+v", calls[0], calls[1])
			}
			e80 := calls[1].event
			if e80.Used != 8 || e80.Capacity != 10 || e80.UsedPercent != 80 || e80.Limit == nil ||
				e80.Limit.Policy != f.limits[0].Name || e80.DeveloperID != f.dev.ID || e80.KeyID != nil {
				t.Errorf("80%% event: %+v", e80)
			}
			if calls[2].event.Used != 10 {
				t.Errorf("100%% event used %d, want 10", calls[2].event.Used)
			}

			log, err := f.svc.Deliveries(ctx, f.dev.ID, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(log) != 2 {
				t.Fatalf("delivery log has %d rows, want 2", len(log))
			}
			first := log[1] // newest first
			if first.State != "delivered" || first.Attempts != 2 || first.LastStatus == nil || *first.LastStatus != 200 ||
				first.WebhookID == nil || *first.WebhookID != hook.ID || first.Destination != rcv.srv.URL+"/hooks" {
				t.Errorf("first delivery: %+v", first)
			}
			var codes []int
			rows, _ := f.pool.Query(ctx, `SELECT status_code FROM alert_delivery_attempts WHERE delivery_id = $1 ORDER BY id`, first.ID)
			for rows.Next() {
				var c int
				_ = rows.Scan(&c)
				codes = append(codes, c)
			}
			if !slices.Equal(codes, []int{500, 200}) {
				t.Errorf("attempts of the first delivery answered %v, want [500 200]", codes)
			}
		})
	}
}

// Two portal instances (each its own pool and Redis store over one database
// and one Redis) evaluating at once fire each crossing once.
func TestTwoEvaluatorsFireOnce(t *testing.T) {
	url := testenv.PostgresURL(t)
	client, prefix := testenv.Redis(t)
	testenv.RealRedis(t, "the rate-limit script")
	f := newFixture(t, newPool(t, url), dailyWindow)
	ctx := context.Background()
	rcv := newReceiver(t)
	if _, secret, err := f.svc.CreateWebhook(ctx, f.dev.ID, rcv.srv.URL); err != nil {
		t.Fatal(err)
	} else {
		rcv.secret = []byte(secret)
	}
	if err := f.svc.EnsureDefaultRule(ctx, f.dev.ID); err != nil {
		t.Fatal(err)
	}
	var evs []*alerts.Evaluator
	var stores []enforce.Store
	for range 2 {
		rs, err := redisstore.New(client, redisstore.Options{Prefix: prefix, DisableUsage: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		stores = append(stores, rs)
		evs = append(evs, f.evaluator(newPool(t, url), rs, false))
	}
	f.spend(stores[0], 5)
	f.spend(stores[1], 5) // 100 %: both thresholds crossed at once
	var mu sync.Mutex
	fired := 0
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 {
		wg.Go(func() {
			<-start
			for range 10 {
				n, err := evs[i].Evaluate(ctx)
				if err != nil {
					t.Errorf("evaluator %d: %v", i, err)
					return
				}
				mu.Lock()
				fired += n
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if fired != 2 {
		t.Fatalf("the two evaluators fired %d crossings, want 2 (80%% and 100%%)", fired)
	}
	var queued int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM alert_deliveries`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if queued != 2 {
		t.Fatalf("%d deliveries queued, want 2", queued)
	}
	// Two workers drain the queue together: each delivery arrives once.
	w1, _ := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{Dialer: receiverDialer()})
	w2, _ := alerts.NewWorker(newPool(t, url), sessionSecret, alerts.WorkerOptions{Dialer: receiverDialer()})
	var wg2 sync.WaitGroup
	for _, w := range []*alerts.Worker{w1, w2} {
		wg2.Go(func() {
			if _, err := w.SendDue(ctx); err != nil {
				t.Errorf("send: %v", err)
			}
		})
	}
	wg2.Wait()
	calls := rcv.snapshot()
	var th []int
	for _, c := range calls {
		th = append(th, c.event.ThresholdPercent)
	}
	slices.Sort(th)
	if !slices.Equal(th, []int{80, 100}) {
		t.Fatalf("receiver got thresholds %v, want [80 100] once each", th)
	}
}

// At 60 % of a daily quota ten hours into the day, the pace projects 144 %:
// the pace alert fires, once, and no threshold does.
func TestPaceAlert(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), plans.LimitInput{Name: "daily", Algorithm: "quota", Period: "day", Limit: 10})
	ctx := context.Background()
	clock := f.dev.CreatedAt.Add(10 * time.Hour)
	store := memstore.New(memstore.Options{Now: func() time.Time { return clock }})
	if _, err := f.svc.SaveRule(ctx, f.dev.ID, nil, []int32{80, 100}, true, false); err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t)
	_, secret, err := f.svc.CreateWebhook(ctx, f.dev.ID, rcv.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rcv.secret = []byte(secret)
	ev := f.evaluator(f.pool, store, false)
	f.spend(store, 4) // 40 %: the pace says 96 %, not beyond
	if n := f.evaluate(ev); n != 0 {
		t.Fatalf("at 40%%: fired %d, want 0", n)
	}
	f.spend(store, 2)
	if n := f.evaluate(ev); n != 1 {
		t.Fatalf("at 60%%: fired %d, want 1 (the pace)", n)
	}
	if n := f.evaluate(ev); n != 0 {
		t.Fatalf("again: fired %d, want 0", n)
	}
	w, _ := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{Dialer: receiverDialer()})
	drain(t, f.pool, w)
	calls := rcv.snapshot()
	if len(calls) != 1 || calls[0].event.Type != alerts.EventPace || calls[0].event.ProjectedUse != 14 {
		t.Fatalf("receiver got %+v, want one quota.pace projecting 14", calls)
	}
	if got, want := calls[0].event.PeriodStart, f.dev.CreatedAt.UTC().Round(time.Second); !got.Equal(want) {
		t.Errorf("period start %v, want the anchor %v", got, want)
	}
}

func TestKeyRuleReplacesAccountRule(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	ctx := context.Background()
	if err := f.svc.EnsureDefaultRule(ctx, f.dev.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SaveRule(ctx, f.dev.ID, &f.key.ID, []int32{50}, false, false); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	store := memstore.New(memstore.Options{Now: func() time.Time { return frozen }})
	ev := f.evaluator(f.pool, store, false)
	f.spend(store, 8)
	if n := f.evaluate(ev); n != 1 {
		t.Fatalf("at 80%% under a key rule of 50%%: fired %d, want 1", n)
	}
	other := int64(999999)
	_, err := f.svc.SaveRule(ctx, f.dev.ID, &other, []int32{50}, false, false)
	var fe *alerts.FieldError
	if !errors.As(err, &fe) || fe.Field != "key" {
		t.Fatalf("rule for a key not theirs: %v, want a field error on key", err)
	}
}

func TestSignAndVerify(t *testing.T) {
	secret := []byte("whsec_test")
	body := []byte(`{"type":"test"}`)
	at := time.Unix(1_800_000_000, 0)
	h := alerts.Sign(secret, at, body)
	if !strings.HasPrefix(h, "t=1800000000,v1=") || len(h) != len("t=1800000000,v1=")+64 {
		t.Fatalf("header %q", h)
	}
	tests := []struct {
		name   string
		secret []byte
		header string
		body   []byte
		now    time.Time
		want   error
	}{
		{"Valid", secret, h, body, at.Add(time.Minute), nil},
		{"ErrBadSignatureOnTamperedBody", secret, h, []byte(`{"type":"tost"}`), at, alerts.ErrBadSignature},
		{"ErrBadSignatureOnOtherSecret", []byte("whsec_other"), h, body, at, alerts.ErrBadSignature},
		{"ErrBadSignatureOnChangedTimestamp", secret, strings.Replace(h, "t=1800000000", "t=1800000001", 1), body, at, alerts.ErrBadSignature},
		{"ErrBadSignatureOnGarbage", secret, "nonsense", body, at, alerts.ErrBadSignature},
		{"ErrStaleAfterTolerance", secret, h, body, at.Add(6 * time.Minute), alerts.ErrStale},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := alerts.Verify(tc.secret, tc.header, tc.body, tc.now, 0); !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCheckURL(t *testing.T) {
	const public = "must be a public address: webhooks cannot reach loopback, private, link-local or reserved addresses, " +
		"localhost, or addresses written in odd forms (the operator can allow a private receiver)"
	tests := []struct{ in, want, err string }{
		{"https://example.com/hooks/sluice", "https://example.com/hooks/sluice", ""},
		{"  http://93.184.215.14:9000/x?token=1 ", "http://93.184.215.14:9000/x?token=1", ""},
		{"", "", "is required"},
		{"ftp://example.com/", "", "must start with https:// or http://"},
		{"javascript:alert(1)", "", "must start with https:// or http://"},
		{"https://user:pw@example.com/", "", "must not contain a user name or password; authenticate by checking the signature"},
		{"https:///path", "", "must name a host, e.g. https://example.com/hooks/sluice"},
		{"https://exa mple.com/", "", "must not contain spaces"},
		{"https://example.com/#frag", "", "must not have a #fragment"},
		{"https://bad_host!.com/", "", "has a bad host name"},
		{"https://example.com:99999/", "", "has a bad port"},
		{"http://169.254.169.254/latest/meta-data/", "", public},
		{"http://0.0.0.0:8080/", "", public},
		{"http://[fe80::1]/", "", public},
		{"http://127.0.0.1:6421/", "", public},
		{"http://[::1]:9000/hook", "", public},
		{"http://localhost:9000/hook", "", public},
		{"http://10.0.0.1/", "", public},
		{"http://172.16.0.1/", "", public},
		{"http://192.168.1.1/", "", public},
		{"http://0/", "", public},
		{"http://0177.0.0.1/", "", public},
		{"http://0x7f000001/", "", public},
		{"http://[::ffff:127.0.0.1]/", "", public},
	}
	for _, tc := range tests {
		got, err := alerts.CheckURL(tc.in, egress.Rules{})
		msg := ""
		var fe *alerts.FieldError
		if errors.As(err, &fe) {
			if fe.Field != "url" {
				t.Errorf("%q: field %q", tc.in, fe.Field)
			}
			msg = fe.Message
		} else if err != nil {
			t.Errorf("%q: %v is not a FieldError", tc.in, err)
		}
		if got != tc.want || msg != tc.err {
			t.Errorf("CheckURL(%q) = %q, %q; want %q, %q", tc.in, got, msg, tc.want, tc.err)
		}
	}
	// The operator's allowlist opens a private receiver.
	if got, err := alerts.CheckURL("http://127.0.0.1:6421/x", receivers); err != nil || got != "http://127.0.0.1:6421/x" {
		t.Errorf("allowed receiver: %q, %v", got, err)
	}
}

func TestParseThresholds(t *testing.T) {
	tests := []struct {
		in   string
		want []int32
		err  bool
	}{
		{"80, 100", []int32{80, 100}, false},
		{"100 50% 50", []int32{50, 100}, false},
		{"", nil, false},
		{"0", nil, true},
		{"101", nil, true},
		{"eighty", nil, true},
		{"1,2,3,4,5,6,7,8,9,10,11", nil, true},
	}
	for _, tc := range tests {
		got, err := alerts.ParseThresholds(tc.in)
		if !slices.Equal(got, tc.want) || (err != nil) != tc.err {
			t.Errorf("ParseThresholds(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// A round prunes firings whose period is over and old finished
// deliveries, and keeps the rest.
func TestEvaluatePrunes(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	ctx := context.Background()
	if err := f.svc.EnsureDefaultRule(ctx, f.dev.ID); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO alert_firings (subject, limit_name, threshold, period_start, period_end) VALUES
		 ('dev:1', 'old', 'pct:80', now() - interval '2 days', now() - interval '1 day'),
		 ('dev:1', 'current', 'pct:80', now() - interval '1 hour', now() + interval '1 hour')`,
		`INSERT INTO alert_deliveries (user_id, email_to, event_type, payload, state, created_at) VALUES
		 ($1, 'a@example.com', 'test', '{}', 'delivered', now() - interval '31 days'),
		 ($1, 'a@example.com', 'test', '{}', 'pending', now() - interval '31 days'),
		 ($1, 'a@example.com', 'test', '{}', 'failed', now() - interval '1 day')`,
	} {
		args := []any{}
		if strings.Contains(q, "$1") {
			args = append(args, f.dev.ID)
		}
		if _, err := f.pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	store := memstore.New(memstore.Options{})
	f.evaluate(f.evaluator(f.pool, store, false))
	var firings []string
	rows, _ := f.pool.Query(ctx, `SELECT limit_name FROM alert_firings ORDER BY 1`)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		firings = append(firings, s)
	}
	if !slices.Equal(firings, []string{"current"}) {
		t.Errorf("firings left %v, want [current]", firings)
	}
	var states []string
	rows, _ = f.pool.Query(ctx, `SELECT state FROM alert_deliveries ORDER BY 1`)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		states = append(states, s)
	}
	if !slices.Equal(states, []string{"failed", "pending"}) {
		t.Errorf("deliveries left %v, want [failed pending]", states)
	}
}

// The stored secret is sealed: the row does not hold it, and a worker with
// another session secret cannot sign with it (the delivery fails, saying
// why, and is retried rather than sent unsigned).
func TestWebhookSecretIsSealed(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	ctx := context.Background()
	rcv := newReceiver(t)
	hook, secret, err := f.svc.CreateWebhook(ctx, f.dev.ID, rcv.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var sealed []byte
	var prefix string
	if err := f.pool.QueryRow(ctx, `SELECT secret_sealed, secret_prefix FROM alert_webhooks WHERE id = $1`, hook.ID).Scan(&sealed, &prefix); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), secret[len("whsec_"):]) || !strings.HasPrefix(secret, prefix) || len(prefix) != 12 {
		t.Fatalf("stored %q with prefix %q for secret %q", sealed, prefix, secret)
	}
	id, err := f.svc.EnqueueTest(ctx, f.dev.ID, hook.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := alerts.NewWorker(f.pool, []byte("another session secret, 32 bytes long at least"), alerts.WorkerOptions{Dialer: receiverDialer()})
	if ok, err := other.SendNow(ctx, id); !ok || err != nil {
		t.Fatalf("SendNow = %v, %v", ok, err)
	}
	if n := len(rcv.snapshot()); n != 0 {
		t.Fatalf("the receiver got %d requests signed without the secret", n)
	}
	log, _ := f.svc.Deliveries(ctx, f.dev.ID, 1)
	if len(log) != 1 || log[0].State != "pending" || log[0].LastError != "webhook secret unreadable (was the session secret changed?)" {
		t.Fatalf("delivery: %+v", log)
	}
}

// A key's own override of a plan limit is what its alerts measure against.
func TestKeyOverrideIsWhatAlertsMeasure(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	ctx := context.Background()
	k, err := f.keys.SetOverrides(ctx, "test", f.key.ID, f.key.Version, []plans.LimitInput{
		{Name: "global", Algorithm: "fixed_window", Limit: 4, WindowSeconds: 86400}})
	if err != nil {
		t.Fatal(err)
	}
	f.key = k
	if f.limits, err = f.plans.KeyLimits(ctx, k.PlanSlug, k.Overrides); err != nil || f.limits[0].Limit != 4 {
		t.Fatalf("limits with the override: %+v %v", f.limits, err)
	}
	if _, err := f.svc.SaveRule(ctx, f.dev.ID, nil, []int32{100}, false, false); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	store := memstore.New(memstore.Options{Now: func() time.Time { return frozen }})
	ev := f.evaluator(f.pool, store, false)
	f.spend(store, 3)
	if n := f.evaluate(ev); n != 0 {
		t.Fatalf("3 of 4: fired %d, want 0", n)
	}
	f.spend(store, 1)
	if n := f.evaluate(ev); n != 1 {
		t.Fatalf("4 of 4: fired %d, want 1", n)
	}
}

// A delivery held by a worker that died is taken up again once its lease
// runs out, and not before.
func TestCrashedWorkersDeliveryIsTakenUp(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	ctx := context.Background()
	rcv := newReceiver(t)
	hook, secret, err := f.svc.CreateWebhook(ctx, f.dev.ID, rcv.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rcv.secret = []byte(secret)
	id, err := f.svc.EnqueueTest(ctx, f.dev.ID, hook.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// What a worker's claim leaves behind when its process dies mid-send.
	if _, err := f.pool.Exec(ctx, `UPDATE alert_deliveries SET locked_until = now() + interval '1 hour', attempts = 1 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	w, _ := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{Dialer: receiverDialer()})
	if n, err := w.SendDue(ctx); n != 0 || err != nil {
		t.Fatalf("while leased: sent %d (%v), want 0", n, err)
	}
	if _, err := f.pool.Exec(ctx, `UPDATE alert_deliveries SET locked_until = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if n, err := w.SendDue(ctx); n != 1 || err != nil {
		t.Fatalf("after the lease: sent %d (%v), want 1", n, err)
	}
	if calls := rcv.snapshot(); len(calls) != 1 || calls[0].event.Type != alerts.EventTest {
		t.Fatalf("receiver got %+v", calls)
	}
	log, _ := f.svc.Deliveries(ctx, f.dev.ID, 1)
	if log[0].State != "delivered" || log[0].Attempts != 2 {
		t.Fatalf("delivery %+v, want delivered on its second attempt", log[0])
	}
}
