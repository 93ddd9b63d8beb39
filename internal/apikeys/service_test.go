package apikeys_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
)

const actor = "user:1"

var testRoutes = []string{"GET /api/search", "GET /api/items/{id}"}

type fixture struct {
	pool  *pgxpool.Pool
	keys  *apikeys.Service
	plans *plans.Service
	free  plans.Plan // the default plan
	pro   plans.Plan
	dev   int64 // a developer on no plan of their own
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	pool := testenv.Postgres(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := fixture{pool: pool, keys: apikeys.NewService(pool, testRoutes, logger), plans: plans.NewService(pool, testRoutes, logger)}
	ctx := context.Background()
	var err error
	f.free, err = f.plans.Create(ctx, actor, plans.PlanInput{Slug: "free", Name: "Free", IsDefault: true,
		Limits: []plans.LimitInput{{Name: "global", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 60}}})
	if err != nil {
		t.Fatal(err)
	}
	f.pro, err = f.plans.Create(ctx, actor, plans.PlanInput{Slug: "pro", Name: "Pro",
		Limits: []plans.LimitInput{{Name: "global", Algorithm: "fixed_window", Limit: 1000, WindowSeconds: 60}}})
	if err != nil {
		t.Fatal(err)
	}
	f.dev = f.user(t, "dev@example.com", nil)
	return f
}

func (f fixture) user(t *testing.T, email string, planID *int64) int64 {
	t.Helper()
	var id int64
	if err := f.pool.QueryRow(context.Background(),
		`INSERT INTO users (email, password_hash, role, plan_id) VALUES ($1, 'x', 'developer', $2) RETURNING id`,
		email, planID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func (f fixture) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (f fixture) lastAudit(t *testing.T) audit.Entry {
	t.Helper()
	es, err := audit.List(context.Background(), f.pool, audit.Filter{Limit: 1})
	if err != nil || len(es) != 1 {
		t.Fatalf("audit.List = %v, %v", es, err)
	}
	return es[0]
}

func TestCreate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	exp := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	k, secret, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: " ci ", ExpiresAt: &exp,
		Overrides: []plans.LimitInput{{Name: "global", Algorithm: "fixed_window", Limit: 50, WindowSeconds: 60}}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if apikeys.Check(secret) != nil {
		t.Fatalf("returned secret %q is malformed", secret)
	}
	if k.ID == 0 || k.UserID != f.dev || k.OwnerEmail != "dev@example.com" || k.Name != "ci" ||
		k.Prefix != apikeys.PrefixOf(secret) || k.PlanID != nil || k.PlanSlug != "free" ||
		len(k.Overrides) != 1 || k.Overrides[0].Limit != 50 || k.Overrides[0].Cost != 1 || k.Overrides[0].Mode != "reject" ||
		k.ExpiresAt == nil || !k.ExpiresAt.Equal(exp) || k.RevokedAt != nil || k.LastUsedAt != nil ||
		k.CreatedAt.IsZero() || k.Version != 1 || k.State(time.Now()) != apikeys.StateActive {
		t.Fatalf("created key = %+v", k)
	}

	t.Run("OnlyTheHashIsStored", func(t *testing.T) {
		h := apikeys.Hash(secret)
		if n := f.count(t, "SELECT count(*) FROM api_key_secrets WHERE key_id = $1 AND hash = $2", k.ID, h[:]); n != 1 {
			t.Fatalf("secrets with the hash = %d, want 1", n)
		}
		var dump string
		if err := f.pool.QueryRow(ctx, `SELECT (SELECT string_agg(t::text, ',') FROM api_keys t) || (SELECT string_agg(t::text, ',') FROM api_key_secrets t) || (SELECT string_agg(t::text, ',') FROM audit_log t)`).Scan(&dump); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(dump, secret[12:]) {
			t.Fatal("the secret is stored in plain text")
		}
	})
	t.Run("Audited", func(t *testing.T) {
		e := f.lastAudit(t)
		var after apikeys.Key
		if e.Action != "key.create" || e.ObjectType != "key" || e.ObjectID != strconv.FormatInt(k.ID, 10) || e.Before != nil ||
			json.Unmarshal(e.After, &after) != nil || after.ID != k.ID {
			t.Fatalf("audit = %+v", e)
		}
	})
	t.Run("KeyPlanOverridesOwnerPlan", func(t *testing.T) {
		owner := f.user(t, "owner@example.com", &f.pro.ID)
		k2, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: owner, Name: "k"})
		if err != nil || k2.PlanSlug != "pro" {
			t.Fatalf("key of a pro developer: plan %q, %v; want pro", k2.PlanSlug, err)
		}
		k3, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: owner, Name: "k", PlanID: &f.free.ID})
		if err != nil || k3.PlanSlug != "free" || *k3.PlanID != f.free.ID {
			t.Fatalf("key with its own plan: %+v, %v", k3, err)
		}
	})

	invalid := []struct {
		name  string
		in    apikeys.NewKey
		field string
	}{
		{"NoUser", apikeys.NewKey{Name: "k"}, "user_id"},
		{"UnknownUser", apikeys.NewKey{UserID: 99999, Name: "k"}, "user_id"},
		{"EmptyName", apikeys.NewKey{UserID: f.dev, Name: " "}, "name"},
		{"UnknownPlan", apikeys.NewKey{UserID: f.dev, Name: "k", PlanID: ptr(int64(99999))}, "plan_id"},
		{"ExpiryInPast", apikeys.NewKey{UserID: f.dev, Name: "k", ExpiresAt: ptr(time.Now().Add(-time.Minute))}, "expires_at"},
		{"BadOverride", apikeys.NewKey{UserID: f.dev, Name: "k", Overrides: []plans.LimitInput{{Name: "g", Algorithm: "fixed_window", Limit: 0, WindowSeconds: 60}}}, "overrides[0].limit"},
		{"OverrideUnknownRoute", apikeys.NewKey{UserID: f.dev, Name: "k", Overrides: []plans.LimitInput{{Name: "g", Route: "GET /x", Algorithm: "fixed_window", Limit: 1, WindowSeconds: 60}}}, "overrides[0].route"},
	}
	for _, tt := range invalid {
		t.Run("Refuses"+tt.name, func(t *testing.T) {
			before := f.count(t, "SELECT count(*) FROM api_keys")
			_, secret, err := f.keys.Create(ctx, actor, tt.in)
			var ve *plans.ValidationError
			if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != tt.field {
				t.Fatalf("Create = %v, want one field error on %q", err, tt.field)
			}
			if secret != "" {
				t.Errorf("a refused create returned a secret")
			}
			if after := f.count(t, "SELECT count(*) FROM api_keys"); after != before {
				t.Errorf("a refused create wrote a key")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestRotate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	k, old, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	r, fresh, err := f.keys.Rotate(ctx, actor, k.ID, time.Hour)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if fresh == old || apikeys.Check(fresh) != nil || r.ID != k.ID || r.Prefix != apikeys.PrefixOf(fresh) || r.Version != 2 {
		t.Fatalf("rotated = %+v (secret changed: %v)", r, fresh != old)
	}
	oldHash, newHash := apikeys.Hash(old), apikeys.Hash(fresh)
	var oldExp, newExp *time.Time
	if err := f.pool.QueryRow(ctx, `SELECT expires_at FROM api_key_secrets WHERE hash = $1`, oldHash[:]).Scan(&oldExp); err != nil {
		t.Fatal(err)
	}
	if err := f.pool.QueryRow(ctx, `SELECT expires_at FROM api_key_secrets WHERE hash = $1`, newHash[:]).Scan(&newExp); err != nil {
		t.Fatal(err)
	}
	if oldExp == nil || oldExp.Sub(time.Now()) < 59*time.Minute || oldExp.Sub(time.Now()) > 61*time.Minute || newExp != nil {
		t.Fatalf("old secret expires %v (want in 1h), new %v (want never)", oldExp, newExp)
	}
	if e := f.lastAudit(t); e.Action != "key.rotate" || e.Before == nil || e.After == nil {
		t.Errorf("audit = %+v", e)
	}

	t.Run("ShorterGraceCutsEarlierSecret", func(t *testing.T) {
		if _, _, err := f.keys.Rotate(ctx, actor, k.ID, 0); err != nil {
			t.Fatal(err)
		}
		if n := f.count(t, `SELECT count(*) FROM api_key_secrets WHERE key_id = $1 AND (expires_at IS NULL OR expires_at > now())`, k.ID); n != 1 {
			t.Fatalf("live secrets after a 0 grace rotation = %d, want 1", n)
		}
	})
	t.Run("RefusesGraceOver24h", func(t *testing.T) {
		var ve *plans.ValidationError
		if _, _, err := f.keys.Rotate(ctx, actor, k.ID, 25*time.Hour); !errors.As(err, &ve) || !ve.Has("grace_seconds") {
			t.Fatalf("Rotate(25h) = %v, want field error on grace_seconds", err)
		}
		if _, _, err := f.keys.Rotate(ctx, actor, k.ID, -time.Second); !errors.As(err, &ve) {
			t.Fatalf("Rotate(-1s) = %v, want a validation error", err)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		if _, _, err := f.keys.Rotate(ctx, actor, 99999, 0); !errors.Is(err, apikeys.ErrNotFound) {
			t.Fatalf("Rotate(missing) = %v", err)
		}
	})
	t.Run("ErrExpired", func(t *testing.T) {
		e, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "soon", ExpiresAt: ptr(time.Now().Add(time.Hour))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.pool.Exec(ctx, `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, e.ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.keys.Rotate(ctx, actor, e.ID, 0); !errors.Is(err, apikeys.ErrExpired) {
			t.Fatalf("Rotate(expired) = %v, want ErrExpired", err)
		}
		got, _ := f.keys.Get(ctx, e.ID)
		if got.State(time.Now()) != apikeys.StateExpired {
			t.Fatalf("state = %s, want expired", got.State(time.Now()))
		}
	})
}

func TestRevoke(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	k, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.keys.Revoke(ctx, actor, k.ID); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	got, err := f.keys.Get(ctx, k.ID)
	if err != nil || got.RevokedAt == nil || got.State(time.Now()) != apikeys.StateRevoked || got.Version != 2 {
		t.Fatalf("after revoke = %+v, %v", got, err)
	}
	if e := f.lastAudit(t); e.Action != "key.revoke" {
		t.Errorf("audit = %+v", e)
	}
	if err := f.keys.Revoke(ctx, actor, k.ID); !errors.Is(err, apikeys.ErrRevoked) {
		t.Errorf("Revoke twice = %v, want ErrRevoked", err)
	}
	if _, _, err := f.keys.Rotate(ctx, actor, k.ID, 0); !errors.Is(err, apikeys.ErrRevoked) {
		t.Errorf("Rotate(revoked) = %v, want ErrRevoked", err)
	}
	if _, err := f.keys.SetPlan(ctx, actor, k.ID, &f.pro.ID); !errors.Is(err, apikeys.ErrRevoked) {
		t.Errorf("SetPlan(revoked) = %v, want ErrRevoked", err)
	}
	if err := f.keys.Revoke(ctx, actor, 99999); !errors.Is(err, apikeys.ErrNotFound) {
		t.Errorf("Revoke(missing) = %v, want ErrNotFound", err)
	}
}

func TestSetOverridesAndPlan(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	k, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	o := []plans.LimitInput{{Name: "search", Route: "GET /api/search", Algorithm: "token_bucket", Limit: 5, WindowSeconds: 1, Burst: 10}}
	k2, err := f.keys.SetOverrides(ctx, actor, k.ID, k.Version, o)
	if err != nil || k2.Version != 2 || len(k2.Overrides) != 1 || k2.Overrides[0].Burst != 10 {
		t.Fatalf("SetOverrides = %+v, %v", k2, err)
	}
	if e := f.lastAudit(t); e.Action != "key.overrides" || e.Before == nil || e.After == nil {
		t.Errorf("audit = %+v", e)
	}
	if _, err := f.keys.SetOverrides(ctx, actor, k.ID, k.Version, nil); !errors.Is(err, apikeys.ErrConflict) {
		t.Fatalf("SetOverrides(stale) = %v, want ErrConflict", err)
	}
	var ve *plans.ValidationError
	dup := append(o, o[0])
	if _, err := f.keys.SetOverrides(ctx, actor, k.ID, k2.Version, dup); !errors.As(err, &ve) || !ve.Has("overrides[1].name") {
		t.Fatalf("SetOverrides(duplicate) = %v, want error on overrides[1].name", err)
	}

	k3, err := f.keys.SetPlan(ctx, actor, k.ID, &f.pro.ID)
	if err != nil || k3.PlanSlug != "pro" || k3.PlanID == nil || *k3.PlanID != f.pro.ID || k3.Version != 3 {
		t.Fatalf("SetPlan(pro) = %+v, %v", k3, err)
	}
	k4, err := f.keys.SetPlan(ctx, actor, k.ID, nil)
	if err != nil || k4.PlanSlug != "free" || k4.PlanID != nil {
		t.Fatalf("SetPlan(nil) = %+v, %v; want the owner's (default) plan", k4, err)
	}
	if _, err := f.keys.SetPlan(ctx, actor, k.ID, ptr(int64(99999))); !errors.As(err, &ve) || !ve.Has("plan_id") {
		t.Fatalf("SetPlan(missing plan) = %v, want field error on plan_id", err)
	}
	if e := f.lastAudit(t); e.Action != "key.plan" {
		t.Errorf("audit = %+v", e)
	}
}

func TestGetForUser(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	other := f.user(t, "other@example.com", nil)
	k, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.keys.GetForUser(ctx, f.dev, k.ID); err != nil || got.ID != k.ID {
		t.Fatalf("GetForUser(owner) = %+v, %v", got, err)
	}
	if _, err := f.keys.GetForUser(ctx, other, k.ID); !errors.Is(err, apikeys.ErrNotFound) {
		t.Fatalf("GetForUser(someone else) = %v, want ErrNotFound", err)
	}
}

func TestList(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	other := f.user(t, "alice@corp.example", nil)
	a, secretA, _ := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "ci runner"})
	b, _, _ := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "laptop"})
	c, _, _ := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: other, Name: "prod_100%"})
	if err := f.keys.Revoke(ctx, actor, b.ID); err != nil {
		t.Fatal(err)
	}
	ids := func(ks []apikeys.Key) []int64 {
		out := []int64{}
		for _, k := range ks {
			out = append(out, k.ID)
		}
		return out
	}
	tests := []struct {
		name   string
		filter apikeys.Filter
		want   []int64
		total  int
	}{
		{"All", apikeys.Filter{}, []int64{c.ID, b.ID, a.ID}, 3},
		{"ByUser", apikeys.Filter{UserID: f.dev}, []int64{b.ID, a.ID}, 2},
		{"ByName", apikeys.Filter{Query: "RUNNER"}, []int64{a.ID}, 1},
		{"ByOwnerEmail", apikeys.Filter{Query: "corp.example"}, []int64{c.ID}, 1},
		{"ByPrefix", apikeys.Filter{Query: a.Prefix[:11]}, []int64{a.ID}, 1},
		{"ByWholeLeakedSecret", apikeys.Filter{Query: secretA}, []int64{a.ID}, 1},
		{"WildcardsAreLiteral", apikeys.Filter{Query: "100%"}, []int64{c.ID}, 1},
		{"UnderscoreIsLiteral", apikeys.Filter{Query: "ci_r"}, []int64{}, 0},
		{"Revoked", apikeys.Filter{State: apikeys.StateRevoked}, []int64{b.ID}, 1},
		{"Active", apikeys.Filter{State: apikeys.StateActive}, []int64{c.ID, a.ID}, 2},
		{"Expired", apikeys.Filter{State: apikeys.StateExpired}, []int64{}, 0},
		{"FirstPage", apikeys.Filter{Limit: 2}, []int64{c.ID, b.ID}, 3},
		{"SecondPage", apikeys.Filter{Limit: 2, Offset: 2}, []int64{a.ID}, 3},
		{"PastTheEnd", apikeys.Filter{Limit: 2, Offset: 10}, []int64{}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ks, total, err := f.keys.List(ctx, tt.filter)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			got := ids(ks)
			if total != tt.total || len(got) != len(tt.want) {
				t.Fatalf("List = %v (total %d), want %v (total %d)", got, total, tt.want, tt.total)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("List = %v, want %v", got, tt.want)
				}
			}
		})
	}
	t.Run("RefusesUnknownState", func(t *testing.T) {
		var ve *plans.ValidationError
		if _, _, err := f.keys.List(ctx, apikeys.Filter{State: "zombie"}); !errors.As(err, &ve) || !ve.Has("state") {
			t.Fatalf("List(bad state) = %v", err)
		}
	})
}

func TestLastUsed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a, _, _ := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "a"})
	b, _, _ := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "b"})
	lu := apikeys.NewLastUsed(f.pool, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour)
	t0 := time.Now().Truncate(time.Microsecond)

	lastUsed := func(id int64) *time.Time {
		var at *time.Time
		if err := f.pool.QueryRow(ctx, `SELECT last_used_at FROM api_keys WHERE id = $1`, id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	t.Run("NothingWrittenBeforeFlush", func(t *testing.T) {
		lu.Touch(a.ID, t0)
		lu.Touch(a.ID, t0.Add(time.Second))
		lu.Touch(b.ID, t0)
		if lastUsed(a.ID) != nil {
			t.Fatal("Touch wrote to the database")
		}
	})
	t.Run("FlushWritesNewestPerKey", func(t *testing.T) {
		if err := lu.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if at := lastUsed(a.ID); at == nil || !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("a last used %v, want %v", at, t0.Add(time.Second))
		}
		if at := lastUsed(b.ID); at == nil || !at.Equal(t0) {
			t.Fatalf("b last used %v, want %v", at, t0)
		}
	})
	t.Run("AtMostOneWritePerMinute", func(t *testing.T) {
		lu.Touch(a.ID, t0.Add(30*time.Second))
		if err := lu.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if at := lastUsed(a.ID); !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("a written again within a minute: %v", at)
		}
		lu.Touch(a.ID, t0.Add(2*time.Minute))
		if err := lu.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if at := lastUsed(a.ID); !at.Equal(t0.Add(2 * time.Minute)) {
			t.Fatalf("a last used %v, want %v", at, t0.Add(2*time.Minute))
		}
	})
	t.Run("UpdateDoesNotNotify", func(t *testing.T) {
		// last_used_at writes must not make every instance rebuild its snapshot
		conn, err := f.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, "LISTEN sluice_changes"); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec(context.Background(), "UNLISTEN *")
		lu.Touch(b.ID, t0.Add(10*time.Minute))
		if err := lu.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// A marker sent after the flush: Postgres delivers notifications in
		// commit order, so if the flush had notified, its notification would
		// arrive first. Waiting for the marker, not for a quiet interval,
		// holds on a slow machine too.
		const marker = "test-marker-after-flush"
		if _, err := f.pool.Exec(ctx, "SELECT pg_notify('sluice_changes', $1)", marker); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("the marker notification did not arrive: %v", err)
		}
		if n.Payload != marker {
			t.Fatalf("flush sent a notification: %+v", n)
		}
	})
	t.Run("RunFlushesOnStop", func(t *testing.T) {
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- lu.Run(runCtx) }()
		lu.Touch(b.ID, t0.Add(20*time.Minute))
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		if at := lastUsed(b.ID); !at.Equal(t0.Add(20 * time.Minute)) {
			t.Fatalf("b last used %v after stop, want %v", at, t0.Add(20*time.Minute))
		}
	})
}

func TestListEdges(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// dev@example.com owns "dev box": the query "dev" matches it by name and
	// by owner email, and "sk_live_" matches both of its secrets once rotated.
	k, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "dev box"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.keys.Rotate(ctx, actor, k.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	bulk := f.user(t, "bulk@corp.example", nil)
	const extra = 5
	if _, err := f.pool.Exec(ctx, `
		WITH ks AS (
			INSERT INTO api_keys (user_id, name) SELECT $1, 'bulk ' || g FROM generate_series(1, $2::int) g RETURNING id)
		INSERT INTO api_key_secrets (key_id, hash, prefix)
		SELECT id, sha256(convert_to(id::text, 'UTF8')), 'sk_test_' || lpad(id::text, 8, '0') FROM ks`,
		bulk, apikeys.MaxTotal+extra); err != nil {
		t.Fatal(err)
	}
	all := apikeys.MaxTotal + extra + 1
	tests := []struct {
		name      string
		filter    apikeys.Filter
		wantLen   int
		wantFirst int64 // id of the first key on the page, 0 for none
		total     int
	}{
		{"MatchedTwoWaysListedOnce", apikeys.Filter{Query: "dev"}, 1, k.ID, 1},
		{"RotatedKeyListedOnce", apikeys.Filter{Query: "sk_live_"}, 1, k.ID, 1},
		{"TotalStopsPastMaxTotal", apikeys.Filter{}, apikeys.DefaultPageSize, k.ID + int64(all) - 1, apikeys.MaxTotal + 1},
		{"SearchTotalStopsPastMaxTotal", apikeys.Filter{Query: "bulk"}, apikeys.DefaultPageSize, k.ID + int64(all) - 1, apikeys.MaxTotal + 1},
		{"PrefixTotalStopsPastMaxTotal", apikeys.Filter{Query: "sk_test_"}, apikeys.DefaultPageSize, k.ID + int64(all) - 1, apikeys.MaxTotal + 1},
		{"ExactNearTheEnd", apikeys.Filter{Limit: 10, Offset: all - 4}, 4, k.ID + 3, all},
		{"SearchExactNearTheEnd", apikeys.Filter{Query: "bulk", Limit: 10, Offset: all - 4}, 3, k.ID + 3, all - 1},
		{"NextPageKnownPastMaxTotal", apikeys.Filter{Limit: 2, Offset: apikeys.MaxTotal}, 2, k.ID + extra, apikeys.MaxTotal + 3},
		{"PastTheEndOfMany", apikeys.Filter{Query: "bulk", Offset: all + 100}, 0, 0, all - 1},
		// the prefix searched is the query's first PrefixLen bytes, here
		// ending inside a two-byte character
		{"HugeOffset", apikeys.Filter{Query: "bulk", Offset: math.MaxInt}, 0, 0, all - 1},
		{"MultibyteQuery", apikeys.Filter{Query: "aéééééééé"}, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ks, total, err := f.keys.List(ctx, tt.filter)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			var first int64
			if len(ks) > 0 {
				first = ks[0].ID
			}
			if len(ks) != tt.wantLen || first != tt.wantFirst || total != tt.total {
				t.Fatalf("List = %d keys from id %d, total %d; want %d from id %d, total %d",
					len(ks), first, total, tt.wantLen, tt.wantFirst, tt.total)
			}
			for i := 1; i < len(ks); i++ {
				if ks[i].ID >= ks[i-1].ID {
					t.Fatalf("page not newest first: id %d after %d", ks[i].ID, ks[i-1].ID)
				}
			}
		})
	}
	t.Run("PageKeysAreWhole", func(t *testing.T) {
		ks, _, err := f.keys.List(ctx, apikeys.Filter{Query: "dev"})
		if err != nil || len(ks) != 1 {
			t.Fatalf("List = %v, %v", ks, err)
		}
		got, err := f.keys.Get(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		// the current (rotated) secret's prefix, the owner and the plan
		a, _ := json.Marshal(ks[0])
		b, _ := json.Marshal(got)
		if string(a) != string(b) {
			t.Fatalf("listed %s, Get %s", a, b)
		}
	})
}

func TestCreateCapsKeysPerDeveloper(t *testing.T) {
	f := newFixture(t)
	f.keys.LimitKeysPerUser(3)
	ctx := context.Background()
	t.Run("TheFourthIsRefused", func(t *testing.T) {
		var ids []int64
		for i := range 3 {
			k, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "k" + strconv.Itoa(i)})
			if err != nil {
				t.Fatalf("key %d: %v", i+1, err)
			}
			ids = append(ids, k.ID)
		}
		if _, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "one too many"}); !errors.Is(err, apikeys.ErrTooManyKeys) {
			t.Fatalf("4th key: err = %v, want ErrTooManyKeys", err)
		}
		if n := f.count(t, `SELECT count(*) FROM api_keys WHERE user_id = $1`, f.dev); n != 3 {
			t.Fatalf("keys stored = %d, want 3: the refused one wrote nothing", n)
		}
		// A revoked key no longer counts.
		if err := f.keys.Revoke(ctx, actor, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: f.dev, Name: "after revoke"}); err != nil {
			t.Fatalf("key after a revocation: %v", err)
		}
	})
	t.Run("ConcurrentCreationsStopAtTheCap", func(t *testing.T) {
		dev := f.user(t, "racer@example.com", nil)
		var mu sync.Mutex
		var wg sync.WaitGroup
		created, refused := 0, 0
		for i := range 10 {
			wg.Go(func() {
				_, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: dev, Name: "r" + strconv.Itoa(i)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created++
				case errors.Is(err, apikeys.ErrTooManyKeys):
					refused++
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if created != 3 || refused != 7 {
			t.Fatalf("created %d, refused %d; want 3 and 7", created, refused)
		}
	})
	t.Run("UnknownOwner", func(t *testing.T) {
		_, _, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: 999999, Name: "orphan"})
		var ve *plans.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "user_id" {
			t.Fatalf("err = %v, want a validation error on user_id", err)
		}
	})
}
