package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/testenv"
)

// pollSignal is a transport that tells when a long poll (?wait=) is sent.
type pollSignal struct {
	once sync.Once
	sent chan struct{}
}

func (p *pollSignal) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.RawQuery, "wait=") {
		p.once.Do(func() { close(p.sent) })
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestRunShutsDownWithAGuardAttached: a guard's long poll (30 s) is in
// flight when the portal is told to stop, with a shutdown timeout of 5 s;
// the poll is answered at once and run returns nil (a clean exit) rather
// than the timeout's error.
func TestRunShutsDownWithAGuardAttached(t *testing.T) {
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_SHUTDOWN_TIMEOUT"] = "5s"
	pool, err := pgxpool.New(context.Background(), env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p := startPortal(t, env)
	ctx := context.Background()
	repo := services.NewRepo(pool)
	if _, err := repo.Create(ctx, "user:1", services.Input{Slug: "app", Name: "App", Routes: []string{"GET /items/{id}"}}); err != nil {
		t.Fatal(err)
	}
	_, token, err := repo.CreateToken(ctx, "user:1", "app", "test")
	if err != nil {
		t.Fatal(err)
	}
	sig := &pollSignal{sent: make(chan struct{})}
	// The portal learns of the new service from NOTIFY.
	var g *guard.Guard
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		g, err = guard.New(ctx, guard.Options{PortalURL: p.url, Token: token, Client: &http.Client{Transport: sig}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	defer g.Close()
	select {
	case <-sig.sent:
	case <-time.After(30 * time.Second):
		t.Fatal("the guard sent no long poll")
	}
	time.Sleep(200 * time.Millisecond) // the poll reaches the handler's wait
	p.cancel()
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("run returned %v with a guard attached, want nil", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("run did not return")
	}
}
