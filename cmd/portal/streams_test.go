package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

// TestCappedStreamsLeaveEnforcementExact wires the whole portal on the
// shared Redis: a developer opens live streams up to the cap, the next is
// answered 429, and with the capped streams open their key, limited to 1
// request an hour, is admitted exactly once.
func TestCappedStreamsLeaveEnforcementExact(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	_, prefix := testenv.Redis(t) // cleans up the keys the portal writes
	cfg, _, err := LoadConfig(nil, envOf(map[string]string{
		"REDIS_URL": testenv.RedisURL(t), "PORTAL_REDIS_PREFIX": prefix,
		"PORTAL_STREAMS_PER_USER": "3", "PORTAL_DATA_DIR": t.TempDir(),
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SessionSecret = []byte(strings.Repeat("s", 32))
	rdb, _, err := openRedis(ctx, cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	handler, closeApp, err := newServer(ctx, serverDeps{cfg: cfg, logger: discardLogger(), pool: pool, redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	defer closeApp()
	defer srv.Close()

	logger := discardLogger()
	hourly, err := plans.NewService(pool, protectedRoutes, logger).Create(ctx, "test", plans.PlanInput{Slug: "hourly", Name: "Hourly",
		Limits: []plans.LimitInput{{Name: "global", Algorithm: "fixed_window", Limit: 1, WindowSeconds: 3600}}})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := users.NewRepo(pool).Create(ctx, users.NewUser{Email: "dev@example.com", Password: "correct horse battery", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	_, secret, err := apikeys.NewService(pool, protectedRoutes, logger).Create(ctx, "test", apikeys.NewKey{UserID: dev.ID, Name: "k", PlanID: &hourly.ID})
	if err != nil {
		t.Fatal(err)
	}

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := browser.PostForm(srv.URL+"/signin", url.Values{"email": {"dev@example.com"}, "password": {"correct horse battery"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", res.StatusCode)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range 3 {
		req, _ := http.NewRequestWithContext(sctx, "GET", srv.URL+"/app/stream", nil)
		res, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i+1, res.StatusCode)
		}
		// The first event: the stream is open and reading the engine.
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "event: ") {
			t.Fatalf("stream %d: first line %q, %v", i+1, line, err)
		}
	}
	res, err = browser.Get(srv.URL + "/app/stream")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "3 live views") {
		t.Fatalf("4th stream: %d %q, want 429 naming the cap", res.StatusCode, body)
	}

	// The key resolves once the snapshot has it (NOTIFY); until then it is 401.
	call := func() int {
		req, _ := http.NewRequest("GET", srv.URL+"/api/search?q=x", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	admitted, rejected := 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for admitted+rejected < 40 {
		switch code := call(); code {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			rejected++
		case http.StatusUnauthorized:
			if time.Now().After(deadline) {
				t.Fatal("the key never resolved")
			}
			time.Sleep(20 * time.Millisecond) // waiting for the snapshot, not for a limit
		default:
			t.Fatalf("API call: %d", code)
		}
	}
	if admitted != 1 {
		t.Fatalf("admitted %d of %d with 3 streams open, want exactly 1 (limit 1 per hour)", admitted, admitted+rejected)
	}
}
