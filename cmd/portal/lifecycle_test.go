package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

const (
	lifecycleEmail    = "operator@example.com"
	lifecyclePassword = "a long operator password"
)

// noRedirects is an HTTP client with a cookie jar that shows redirects
// instead of following them.
func noRedirects(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// TestRunSessionKey is the documented PORTAL_SESSION_SECRET default: without
// the variable, the secret is generated in PORTAL_DATA_DIR/session.key,
// readable by the portal's user alone, and the next start reuses it, so a
// browser signed in before a restart is still signed in after it.
func TestRunSessionKey(t *testing.T) {
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_ADMIN_EMAIL"] = lifecycleEmail
	env["PORTAL_ADMIN_PASSWORD"] = lifecyclePassword
	keyPath := filepath.Join(env["PORTAL_DATA_DIR"], "session.key")

	first := startPortal(t, env)
	info, err := os.Stat(keyPath)
	if err != nil {
		t.Fatalf("no session.key after the first start: %v", err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("session.key has mode %v, want 0600", mode)
	}
	secret, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(secret) < 32 {
		t.Errorf("session.key holds %d bytes, want at least 32", len(secret))
	}
	if strings.Contains(first.out.String(), string(secret)) {
		t.Error("the session secret appears in the output")
	}

	browser := noRedirects(t)
	res, err := browser.PostForm(first.url+"/signin", url.Values{"email": {lifecycleEmail}, "password": {lifecyclePassword}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: status %d, want 303", res.StatusCode)
	}
	signedIn := func(base string) int {
		t.Helper()
		res, err := browser.Get(base + "/admin/plans")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := signedIn(first.url); got != http.StatusOK {
		t.Fatalf("/admin/plans after signing in: status %d, want 200", got)
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	second := startPortal(t, env)
	again, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, secret) {
		t.Error("the second start replaced session.key")
	}
	if info, err := os.Stat(keyPath); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("session.key after the second start: %v, %v", info.Mode(), err)
	}
	// The browser's cookie is for 127.0.0.1, whatever the port.
	if got := signedIn(second.url); got != http.StatusOK {
		t.Errorf("/admin/plans after a restart: status %d, want 200 (still signed in)", got)
	}
}

// queueKey creates a developer and a key on a plan whose one tier queues
// GET /api/items/{id} behind a leaky bucket releasing one request every 4
// s, and returns the key's secret.
func queueKey(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	routes := []string{sampleapi.RouteSearch, sampleapi.RouteItem, sampleapi.RouteCreateReport, sampleapi.RouteJob}
	logger := slog.New(slog.DiscardHandler)
	dev, err := users.NewRepo(pool).Create(ctx, users.NewUser{Email: "dev@example.com", Password: "a long developer password", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plans.NewService(pool, routes, logger).Create(ctx, "test", plans.PlanInput{Slug: "queued", Name: "Queued", IsPublic: true,
		Limits: []plans.LimitInput{{Name: "items", Route: sampleapi.RouteItem, Algorithm: "leaky_bucket", Mode: "queue", Limit: 1, WindowSeconds: 4, Burst: 1}}})
	if err != nil {
		t.Fatalf("create plan: %v", err)
	}
	_, secret, err := apikeys.NewService(pool, routes, logger).Create(ctx, "test", apikeys.NewKey{UserID: dev.ID, Name: "queued", PlanID: &pl.ID})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// getItem calls GET /api/items/1 with the key; wrote is closed once the
// request is on the wire.
func getItem(ctx context.Context, base, secret string, wrote chan<- struct{}) (*http.Response, error) {
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		if wrote != nil {
			close(wrote)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, base+"/api/items/1", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	return http.DefaultClient.Do(req)
}

// waitForDecisions polls the portal's /metrics (at metricsURL) until it has
// made want rate-limit decisions on route.
func waitForDecisions(t *testing.T, metricsURL, route string, want int) {
	t.Helper()
	line := `sluice_enforce_decision_seconds_count{route="` + route + `",way_in="middleware"} ` + strconv.Itoa(want)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := get(t, metricsURL)
		if strings.Contains(body, line+"\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in /metrics within 30 s", line)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunShutdownWaitsForRequestsInFlight is PORTAL_SHUTDOWN_TIMEOUT: on
// SIGINT/SIGTERM (here the context run is given ends, as main's signal
// handler makes it) a request waiting its turn in a leaky-bucket queue is
// still answered, and run returns cleanly after it; with a timeout shorter
// than the wait, shutdown gives up and says so.
func TestRunShutdownWaitsForRequestsInFlight(t *testing.T) {
	tests := []struct {
		name    string
		timeout string
		// wantErr is what run returns: nil after a complete shutdown.
		wantErr error
	}{
		{"WaitsForTheQueuedRequest", "60s", nil},
		{"GivesUpAfterTheTimeout", "1s", context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := baseEnv(t)
			env["DATABASE_URL"] = testenv.PostgresURL(t)
			env["PORTAL_SHUTDOWN_TIMEOUT"] = tt.timeout
			pool, err := pgxpool.New(context.Background(), env["DATABASE_URL"])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			p := startPortal(t, env)
			secret := queueKey(t, pool)
			// The snapshot learns of the key from NOTIFY.
			deadline := time.Now().Add(30 * time.Second)
			for {
				req, _ := http.NewRequest(http.MethodGet, p.url+"/api/rate-limit-status", nil)
				req.Header.Set("Authorization", "Bearer "+secret)
				if res, err := http.DefaultClient.Do(req); err == nil {
					res.Body.Close()
					if res.StatusCode == http.StatusOK {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("the portal did not accept the new key within 30 s")
				}
				time.Sleep(50 * time.Millisecond)
			}

			// The first request takes the bucket's one slot; the second
			// waits about 4 s for its turn.
			res, err := getItem(context.Background(), p.url, secret, nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("first request: status %d", res.StatusCode)
			}
			type answer struct {
				res *http.Response
				err error
			}
			answered := make(chan answer, 1)
			wrote := make(chan struct{})
			go func() {
				res, err := getItem(context.Background(), p.url, secret, wrote)
				answered <- answer{res, err}
			}()
			<-wrote
			// On the wire is not enough: a request on a kept-alive
			// connection that the server has not read yet is on an idle
			// connection, which Shutdown closes. The event to wait for is
			// the portal having decided it (and so holding it in the
			// queue): its decision count for the route reaches 2.
			waitForDecisions(t, p.metricsURL(t), sampleapi.RouteItem, 2)
			p.cancel() // as SIGTERM does
			select {
			case err := <-p.done:
				p.done <- err
				if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
					t.Fatalf("run returned %v, want %v", err, tt.wantErr)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("run did not return within 2 minutes of the cancel")
			}
			if tt.wantErr != nil {
				return
			}
			// run returned after a complete shutdown: the queued request
			// was answered first.
			select {
			case a := <-answered:
				if a.err != nil {
					t.Fatalf("the request in flight failed: %v", a.err)
				}
				body, _ := io.ReadAll(a.res.Body)
				a.res.Body.Close()
				if a.res.StatusCode != http.StatusOK || a.res.Header.Get(httplimit.HeaderQueueDelay) == "" {
					t.Errorf("the request in flight: status %d, %s %q, body %q; want 200 after a queue wait",
						a.res.StatusCode, httplimit.HeaderQueueDelay, a.res.Header.Get(httplimit.HeaderQueueDelay), body)
				}
			default:
				t.Fatal("run returned before the request in flight was answered")
			}
		})
	}
}

// TestRunJSONLogs is PORTAL_LOG_FORMAT=json: every log line the portal
// writes is one JSON object with time, level and msg; the only other lines
// are the URL banners meant for people (the portal's, /metrics').
func TestRunJSONLogs(t *testing.T) {
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["REDIS_URL"] = testenv.RedisURL(t)
	_, prefix := testenv.Redis(t)
	env["PORTAL_REDIS_PREFIX"] = prefix
	env["PORTAL_LOG_FORMAT"] = "json"
	env["PORTAL_LOG_LEVEL"] = "debug"
	env["PORTAL_ADMIN_PASSWORD"] = lifecyclePassword
	p := startPortal(t, env)
	if status, _ := get(t, p.url+"/api/items/1"); status != http.StatusOK {
		t.Errorf("GET /api/items/1: status %d", status)
	}
	if err := p.stop(t); err != nil {
		t.Fatal(err)
	}
	messages := map[string]bool{}
	for line := range strings.Lines(p.out.String()) {
		line = strings.TrimSpace(line)
		if line == "" || listeningRE.MatchString(line) || metricsRE.MatchString(line) {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON log line: %q", line)
			continue
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("log line without %q: %s", k, line)
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, rec["time"].(string)); err != nil {
			t.Errorf("time %v is not RFC 3339: %s", rec["time"], line)
		}
		messages[rec["msg"].(string)] = true
		if strings.Contains(line, lifecyclePassword) {
			t.Errorf("a log line holds the admin password: %s", line)
		}
	}
	for _, want := range []string{"store of record: postgres from DATABASE_URL", "shutting down", "stopped"} {
		if !messages[want] {
			t.Errorf("no %q among the JSON log messages %v", want, messages)
		}
	}
}
