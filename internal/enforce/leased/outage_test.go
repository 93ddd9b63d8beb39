package leased_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/leased"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// link is a TCP proxy to Redis that the test can cut and restore, as a
// network partition would.
type link struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newLink(t *testing.T, to string) *link {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{ln: ln, to: to}
	t.Cleanup(func() { ln.Close(); l.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			if l.cut {
				l.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				l.mu.Unlock()
				c.Close()
				continue
			}
			l.conns = append(l.conns, c, up)
			l.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return l
}

func (l *link) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	if cut {
		for _, c := range l.conns {
			c.Close()
		}
		l.conns = nil
	}
}

// TestLeasesServeThroughAnOutageAndGiveBackAfter: with Redis unreachable,
// the lease held keeps admitting until it expires, and then the store's
// failure shows (here no failover: an error); what was left is given back
// once Redis answers again.
func TestLeasesServeThroughAnOutageAndGiveBackAfter(t *testing.T) {
	r := testenv.StartPrivateRedis(t)
	l := newLink(t, r.Addr)
	client := redis.NewClient(&redis.Options{Addr: l.ln.Addr().String(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{Prefix: "t:", DisableUsage: true, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	s := leased.New(rs, rs, leased.Options{Instances: 1})
	t.Cleanup(func() { s.Close() })

	// 100,000 a day: a lease of at most 2,000, the first 250; a second
	// refills about one unit.
	lim := enforce.Limit{Name: "plan", Algorithm: enforce.TokenBucket, Limit: 100_000, Window: 24 * time.Hour, Precision: enforce.PrecisionLeased}
	req := enforce.Request{Subject: "dev:1", Limits: []enforce.Limit{lim}}
	ctx := context.Background()
	for range 10 {
		if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("before the outage: %v %+v", err, d)
		}
	}
	l.setCut(true)
	for i := range 10 {
		if d, err := s.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("request %d of the outage, within the lease: %v %+v", i, err, d)
		}
	}
	// The lease lasts a second (enforce.LeaseTTL): after it, the store's
	// failure is the answer.
	time.Sleep(enforce.LeaseTTL(lim) + 100*time.Millisecond)
	if _, err := s.Allow(ctx, req); err == nil {
		t.Fatal("admitted after the lease expired with Redis unreachable")
	}
	if s.Stats().GivenBack.Load() != 0 {
		t.Fatal("given back while Redis was unreachable")
	}
	l.setCut(false)
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().GivenBack.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := s.Stats().GivenBack.Load(); got != 230 {
		t.Fatalf("given back %d after Redis returned, want the 230 the lease of 250 left", got)
	}
	d, err := rs.Peek(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// 20 admitted; a few seconds' refill at most a few units.
	if rem := d.Layers[0].Remaining; rem < 100_000-20 || rem > 100_000 {
		t.Fatalf("Redis remaining %d after 20 admitted and the rest given back, want 99,980 and a few seconds' refill", rem)
	}
}
