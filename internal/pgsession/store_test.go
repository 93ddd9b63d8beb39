package pgsession_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/sessions"

	"github.com/sluicehq/sluice/internal/pgsession"
	"github.com/sluicehq/sluice/internal/testenv"
)

func newStore(t *testing.T) (*pgsession.Store, *time.Time, int64, func(string) int) {
	pool := testenv.Postgres(t)
	var uid int64
	if err := pool.QueryRow(t.Context(),
		`INSERT INTO users (email, password_hash, role) VALUES ('u@example.com', 'x', 'developer') RETURNING id`).Scan(&uid); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st := pgsession.New(pool, bytes.Repeat([]byte("k"), 32), pgsession.Options{
		Cookie:  sessions.Options{Path: "/", MaxAge: 3600, HttpOnly: true},
		UserKey: "uid",
		Now:     func() time.Time { return now },
	})
	rows := func(where string) int {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM sessions WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return st, &now, uid, rows
}

// save stores values in a new session and returns its cookie.
func save(t *testing.T, st *pgsession.Store, values map[any]any) *http.Cookie {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	sess, err := st.New(r, "s")
	if err != nil {
		t.Fatal(err)
	}
	sess.Values = values
	w := httptest.NewRecorder()
	if err := st.Save(r, w, sess); err != nil {
		t.Fatal(err)
	}
	cs := w.Result().Cookies()
	if len(cs) != 1 {
		t.Fatalf("%d cookies set", len(cs))
	}
	return cs[0]
}

// load reads the session a cookie names, through a fresh request.
func load(t *testing.T, st *pgsession.Store, c *http.Cookie) *sessions.Session {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(c)
	sess, err := st.Get(r, "s")
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func TestRoundTripAndOnlyAHashStored(t *testing.T) {
	st, _, uid, rows := newStore(t)
	c := save(t, st, map[any]any{"uid": uid, "role": "developer"})
	if !c.HttpOnly || c.MaxAge != 3600 || len(c.Value) < 40 {
		t.Errorf("cookie %+v", c)
	}
	sess := load(t, st, c)
	if sess.IsNew || sess.Values["uid"] != uid || sess.Values["role"] != "developer" {
		t.Fatalf("loaded %+v new=%v", sess.Values, sess.IsNew)
	}
	if n := rows("user_id = " + itoa(uid)); n != 1 {
		t.Errorf("%d rows for the user, want 1", n)
	}
	if n := rows("position(convert_to('" + c.Value + "', 'UTF8') in id_hash) > 0 OR position(convert_to('" + c.Value + "', 'UTF8') in data) > 0"); n != 0 {
		t.Errorf("the cookie's identifier is stored in clear")
	}
}

func TestEndedSessionsDoNotLoad(t *testing.T) {
	st, now, uid, _ := newStore(t)
	t.Run("SignOut", func(t *testing.T) {
		c := save(t, st, map[any]any{"uid": uid})
		r := httptest.NewRequest(http.MethodPost, "/signout", nil)
		r.AddCookie(c)
		sess, _ := st.Get(r, "s")
		sess.Options.MaxAge = -1
		w := httptest.NewRecorder()
		if err := st.Save(r, w, sess); err != nil {
			t.Fatal(err)
		}
		if got := w.Result().Cookies(); len(got) != 1 || got[0].MaxAge >= 0 {
			t.Errorf("cookie not expired: %+v", got)
		}
		if !load(t, st, c).IsNew {
			t.Error("the copied cookie still loads its session after sign-out")
		}
	})
	t.Run("EndUserKeepsOne", func(t *testing.T) {
		a := save(t, st, map[any]any{"uid": uid})
		b := save(t, st, map[any]any{"uid": uid})
		other := save(t, st, map[any]any{"note": "no user"})
		n, err := st.EndUser(t.Context(), uid, a.Value)
		if err != nil || n != 1 {
			t.Fatalf("EndUser = %d, %v; want 1 ended", n, err)
		}
		if load(t, st, a).IsNew || !load(t, st, b).IsNew || load(t, st, other).IsNew {
			t.Error("EndUser kept the wrong sessions")
		}
		if n, _ := st.EndUser(t.Context(), uid, ""); n != 1 || !load(t, st, a).IsNew {
			t.Errorf("EndUser(all) ended %d", n)
		}
	})
	t.Run("Expired", func(t *testing.T) {
		c := save(t, st, map[any]any{"uid": uid})
		*now = now.Add(time.Hour)
		if !load(t, st, c).IsNew {
			t.Error("a session past its MaxAge still loads")
		}
	})
	t.Run("Renew", func(t *testing.T) {
		c := save(t, st, map[any]any{"uid": uid})
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.AddCookie(c)
		sess, _ := st.Get(r, "s")
		if err := st.Renew(t.Context(), sess); err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		if err := st.Save(r, w, sess); err != nil {
			t.Fatal(err)
		}
		fresh := w.Result().Cookies()[0]
		if fresh.Value == c.Value || load(t, st, fresh).Values["uid"] != uid {
			t.Errorf("renewed cookie %q (old %q)", fresh.Value, c.Value)
		}
		if !load(t, st, c).IsNew {
			t.Error("the identifier from before the renewal still loads")
		}
	})
	t.Run("GarbageCookie", func(t *testing.T) {
		if !load(t, st, &http.Cookie{Name: "s", Value: "not-an-id"}).IsNew {
			t.Error("garbage cookie loaded a session")
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
