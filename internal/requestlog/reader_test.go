package requestlog_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/testenv"
)

// developer inserts a developer with one key and returns their ids.
func developer(t *testing.T, pool *pgxpool.Pool, email, keyName, prefix string) (user, key int64) {
	t.Helper()
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ($1, 'x', 'developer') RETURNING id`, email).Scan(&user); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO api_keys (user_id, name) VALUES ($1, $2) RETURNING id`, user, keyName).Scan(&key); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(prefix))
	if _, err := pool.Exec(ctx, `INSERT INTO api_key_secrets (key_id, hash, prefix) VALUES ($1, $2, $3)`, key, h[:], prefix); err != nil {
		t.Fatal(err)
	}
	return user, key
}

func ids(rows []requestlog.Row) string {
	var s []string
	for _, r := range rows {
		s = append(s, fmt.Sprintf("%s/%d/%s", r.Outcome, r.UserID, r.At.Format("15:04")))
	}
	return strings.Join(s, " ")
}

func TestReaderFiltersAndPages(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	ann, annKey := developer(t, pool, "ann@example.com", "ann's key", "sk_live_Ann1")
	bob, bobKey := developer(t, pool, "bob@example.com", "bob's key", "sk_live_Bob1")
	base := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	w := requestlog.NewWriter(pool, requestlog.Options{Now: func() time.Time { return base.Add(time.Hour) }, AdmitSample: 1})
	// Ann: 12:00 admitted, 12:01 rejected, 12:02 admitted with a 503 from
	// the upstream, 12:03 rejected on another route. Bob: 12:00 rejected.
	// Anonymous: 12:04 rejected.
	a := entry(base, requestlog.Admitted, ann, annKey)
	r1 := entry(base.Add(time.Minute), requestlog.Rejected, ann, annKey)
	e503 := entry(base.Add(2*time.Minute), requestlog.Admitted, ann, annKey)
	e503.Status, e503.UpstreamStatus = 503, 503
	r2 := entry(base.Add(3*time.Minute), requestlog.Rejected, ann, annKey)
	r2.Route, r2.Layer = "GET /api/items/{id}", "pro-items"
	b := entry(base, requestlog.Rejected, bob, bobKey)
	anon := entry(base.Add(4*time.Minute), requestlog.Rejected, 0, 0)
	anon.Plan, anon.Layer = "anonymous", "anonymous-search"
	for _, e := range []requestlog.Entry{a, r1, e503, r2, b, anon} {
		w.Log(e)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rd := requestlog.NewReader(pool)
	day := requestlog.Filter{From: base.Add(-time.Hour), To: base.Add(time.Hour)}
	with := func(f func(*requestlog.Filter)) requestlog.Filter { x := day; f(&x); return x }
	tests := []struct {
		name   string
		filter requestlog.Filter
		want   string
	}{
		{"Everything", day, "rejected/0/12:04 rejected/1/12:03 admitted/1/12:02 rejected/1/12:01 rejected/2/12:00 admitted/1/12:00"},
		{"OneDeveloper", with(func(f *requestlog.Filter) { f.UserID = ann }), "rejected/1/12:03 admitted/1/12:02 rejected/1/12:01 admitted/1/12:00"},
		{"ADeveloperAndAnothersKey", with(func(f *requestlog.Filter) { f.UserID, f.KeyID = ann, bobKey }), ""},
		{"OneKey", with(func(f *requestlog.Filter) { f.KeyID = bobKey }), "rejected/2/12:00"},
		{"Rejected", with(func(f *requestlog.Filter) { f.UserID, f.Outcome = ann, requestlog.Rejected }), "rejected/1/12:03 rejected/1/12:01"},
		{"Route", with(func(f *requestlog.Filter) { f.Route = "GET /api/items/{id}" }), "rejected/1/12:03"},
		{"Layer", with(func(f *requestlog.Filter) { f.Layer = "pro-search" }), "rejected/1/12:01 rejected/2/12:00"},
		{"Status", with(func(f *requestlog.Filter) { f.Status = 503 }), "admitted/1/12:02"},
		{"StatusClass", with(func(f *requestlog.Filter) { f.StatusClass = 2 }), "admitted/1/12:00"},
		{"Anonymous", with(func(f *requestlog.Filter) { f.Anonymous = true }), "rejected/0/12:04"},
		{"AddressBlock", with(func(f *requestlog.Filter) { f.Address = "192.0.2.0/24" }), "rejected/0/12:04"},
		{"Plan", with(func(f *requestlog.Filter) { f.Plan = "anonymous" }), "rejected/0/12:04"},
		{"WayIn", with(func(f *requestlog.Filter) { f.WayIn = requestlog.WayProxy }), ""},
		{"TimeRange", with(func(f *requestlog.Filter) { f.From, f.To = base.Add(time.Minute), base.Add(3*time.Minute) }), "admitted/1/12:02 rejected/1/12:01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, next, err := rd.List(ctx, tt.filter, requestlog.Cursor{}, 50)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(rows); got != tt.want {
				t.Errorf("rows %q, want %q", got, tt.want)
			}
			if next != (requestlog.Cursor{}) {
				t.Errorf("next cursor %v on the only page", next)
			}
		})
	}

	t.Run("RowsCarryNames", func(t *testing.T) {
		rows, _, err := rd.List(ctx, with(func(f *requestlog.Filter) {
			f.UserID = ann
			f.Outcome = requestlog.Rejected
			f.Route = "GET /api/search"
		}), requestlog.Cursor{}, 10)
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows %v, %v", rows, err)
		}
		r := rows[0]
		if r.KeyName != "ann's key" || r.KeyPrefix != "sk_live_Ann1" || r.Email != "ann@example.com" || r.Layer != "pro-search" ||
			r.RetryAfter != 2 || r.Status != 429 || r.WayIn != "middleware" || r.Weight != 1 {
			t.Errorf("row %+v", r)
		}
	})

	t.Run("Pages", func(t *testing.T) {
		var all []string
		var cur requestlog.Cursor
		for page := 0; ; page++ {
			rows, next, err := rd.List(ctx, day, cur, 2)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, ids(rows))
			if next == (requestlog.Cursor{}) {
				break
			}
			// The cursor travels through a URL.
			if cur, err = requestlog.ParseCursor(next.String()); err != nil {
				t.Fatal(err)
			}
			if page > 5 {
				t.Fatal("no end")
			}
		}
		want := []string{"rejected/0/12:04 rejected/1/12:03", "admitted/1/12:02 rejected/1/12:01", "rejected/2/12:00 admitted/1/12:00"}
		if strings.Join(all, "|") != strings.Join(want, "|") {
			t.Errorf("pages %q, want %q", all, want)
		}
	})

	t.Run("EachStopsOnError", func(t *testing.T) {
		stop := errors.New("enough")
		n := 0
		err := rd.Each(ctx, day, func(requestlog.Row) error {
			n++
			if n == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || n != 3 {
			t.Errorf("Each read %d rows and returned %v, want 3 and the callback's error", n, err)
		}
	})
}

func TestParseCursorRefusesWhatItDidNotWrite(t *testing.T) {
	for _, s := range []string{"x", "1", "1.x", "1.0", "1.-4", ".5"} {
		if _, err := requestlog.ParseCursor(s); !errors.Is(err, requestlog.ErrCursor) {
			t.Errorf("ParseCursor(%q) = %v, want ErrCursor", s, err)
		}
	}
	c := requestlog.Cursor{At: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), ID: 9}
	if got, err := requestlog.ParseCursor(c.String()); err != nil || got != c {
		t.Errorf("round trip %v -> %v, %v", c, got, err)
	}
}
