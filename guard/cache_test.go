package guard_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/guard"
)

// closedURL is an http URL on which nothing listens: a portal that is down.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr
}

// TestGuardStartsFromItsCachedPolicy: a guard that reached the portal once
// leaves its policy on disk; a guard started while the portal is down
// starts from it and enforces it (the plan's 3 an hour: 3 admitted, then
// 429); a cache older than CacheMaxAge, or none, leaves New failing.
func TestGuardStartsFromItsCachedPolicy(t *testing.T) {
	p := newPortal(t)
	ctx := context.Background()
	cache := filepath.Join(t.TempDir(), "policy.json")
	first, err := guard.New(ctx, guard.Options{PortalURL: p.url, Token: p.token, CacheFile: cache})
	if err != nil {
		t.Fatal(err)
	}
	version := first.Version()
	first.Close()
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v, mode %v; want 0600", err, fi.Mode())
	}

	down := closedURL(t)
	t.Run("PortalDown", func(t *testing.T) {
		g, err := guard.New(ctx, guard.Options{PortalURL: down, Token: p.token, CacheFile: cache})
		if err != nil {
			t.Fatalf("New with the portal down and a cached policy: %v", err)
		}
		defer g.Close()
		if g.Version() != version {
			t.Errorf("version %d, want the cached %d", g.Version(), version)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /items/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
		codes := map[int]int{}
		for range 4 {
			req := httptest.NewRequest("GET", "/items/1", nil)
			req.Header.Set("Authorization", "Bearer "+p.secret)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			codes[rec.Code]++
		}
		if codes[http.StatusOK] != 3 || codes[http.StatusTooManyRequests] != 1 {
			t.Errorf("4 requests on the cached policy: %v, want 3 admitted and 1 rejected", codes)
		}
	})
	t.Run("CacheTooOld", func(t *testing.T) {
		if _, err := guard.New(ctx, guard.Options{PortalURL: down, Token: p.token, CacheFile: cache, CacheMaxAge: time.Nanosecond}); err == nil {
			t.Error("New started from a cache older than CacheMaxAge")
		}
	})
	t.Run("NoCache", func(t *testing.T) {
		if _, err := guard.New(ctx, guard.Options{PortalURL: down, Token: p.token, CacheFile: filepath.Join(t.TempDir(), "none.json")}); err == nil {
			t.Error("New started with neither the portal nor a cache")
		}
	})
	t.Run("TokenRefusedIgnoresTheCache", func(t *testing.T) {
		if _, err := guard.New(ctx, guard.Options{PortalURL: p.url, Token: "sluice_svc_nope", CacheFile: cache}); err != guard.ErrUnauthorized {
			t.Errorf("New with a refused token = %v, want ErrUnauthorized", err)
		}
	})
}
