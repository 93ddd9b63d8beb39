package web_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/web"
)

// countingStore counts the Peeks the dashboards make.
type countingStore struct {
	enforce.Store
	peeks atomic.Int64
}

func (c *countingStore) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	c.peeks.Add(1)
	return c.Store.Peek(ctx, req)
}

// openStream opens path as c and reads its first event; the stream stays
// open until ctx ends.
func openStream(t *testing.T, ctx context.Context, c *client, path string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.e.srv.URL+path, nil)
	res, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	br := bufio.NewReaderSize(res.Body, 1<<16)
	if res.StatusCode == http.StatusOK {
		readEvent(t, br)
	}
	return res, br
}

// readEvent reads one SSE event, up to its blank line.
func readEvent(t *testing.T, br *bufio.Reader) {
	t.Helper()
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read event: %v", err)
		}
		if line == "\n" {
			return
		}
	}
}

func TestStreamsCapped(t *testing.T) {
	t.Run("PerUser", func(t *testing.T) {
		e := newEnvWith(t, func(d *web.Deps) { d.StreamsPerUser = 2 })
		e.createKey(e.dev.ID, "backend")
		c := e.signedIn(developerEmail)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for i := range 2 {
			if res, _ := openStream(t, ctx, c, "/app/stream"); res.StatusCode != http.StatusOK {
				t.Fatalf("stream %d: %d", i+1, res.StatusCode)
			}
		}
		res, _ := openStream(t, ctx, c, "/app/stream")
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "2 live views open") {
			t.Fatalf("3rd stream: %d, Retry-After %q, %q; want 429 naming the cap", res.StatusCode, res.Header.Get("Retry-After"), body)
		}
		// The operator's streams are counted apart from the developer's.
		k, _ := e.createKey(e.dev.ID, "other")
		op := e.signedIn(operatorEmail)
		if res, _ := openStream(t, ctx, op, "/admin/live/stream?keys="+itoa(k.ID)); res.StatusCode != http.StatusOK {
			t.Fatalf("operator's stream: %d", res.StatusCode)
		}
	})
	t.Run("ClosingAStreamFreesItsSlot", func(t *testing.T) {
		e := newEnvWith(t, func(d *web.Deps) { d.StreamsPerUser = 1 })
		c := e.signedIn(developerEmail)
		ctx, cancel := context.WithCancel(context.Background())
		if res, _ := openStream(t, ctx, c, "/app/stream"); res.StatusCode != http.StatusOK {
			t.Fatalf("stream: %d", res.StatusCode)
		}
		cancel()
		// The server notices the closed stream at its next write; the slot
		// is free once it has.
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx2, cancel2 := context.WithCancel(context.Background())
			res, _ := openStream(t, ctx2, c, "/app/stream")
			code := res.StatusCode
			cancel2()
			if code == http.StatusOK {
				return
			}
			if code != http.StatusTooManyRequests || time.Now().After(deadline) {
				t.Fatalf("reopening after close: %d", code)
			}
			time.Sleep(100 * time.Millisecond) // until the server's next tick sees the close
		}
	})
	t.Run("InAll", func(t *testing.T) {
		e := newEnvWith(t, func(d *web.Deps) { d.StreamsMax = 1 })
		k, _ := e.createKey(e.dev.ID, "backend")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if res, _ := openStream(t, ctx, e.signedIn(developerEmail), "/app/stream"); res.StatusCode != http.StatusOK {
			t.Fatalf("first stream: %d", res.StatusCode)
		}
		res, _ := openStream(t, ctx, e.signedIn(operatorEmail), "/admin/live/stream?keys="+itoa(k.ID))
		if res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a second user's stream beyond StreamsMax: %d, want 429", res.StatusCode)
		}
	})
}

// TestStreamsOfOneViewShareTheirReads: five operators watching the same key
// cost the store far fewer reads than one per stream per tick.
func TestStreamsOfOneViewShareTheirReads(t *testing.T) {
	var counter *countingStore
	e := newEnvWith(t, func(d *web.Deps) {
		counter = &countingStore{Store: d.Limiter}
		d.Dashboard = counter
		d.StreamsPerUser = 10
	})
	e.defaultPlan() // the key's limits, which each computation peeks
	k, _ := e.createKey(e.dev.ID, "backend")
	op := e.signedIn(operatorEmail)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const streams, events = 5, 3
	readers := make([]*bufio.Reader, streams)
	for i := range readers {
		res, br := openStream(t, ctx, op, "/admin/live/stream?keys="+itoa(k.ID))
		if res.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i+1, res.StatusCode)
		}
		readers[i] = br
	}
	var wg sync.WaitGroup
	for _, br := range readers {
		wg.Go(func() {
			for range events - 1 {
				readEvent(t, br)
			}
		})
	}
	wg.Wait()
	// 15 events were delivered; views are recomputed at most every 0.8 s
	// whatever the number of streams, so the reads are about one a second
	// (plus the first, unshared, of each stream that opened while no frame
	// was fresh), far below one per event.
	delivered := int64(streams * events)
	got := counter.peeks.Load()
	if got == 0 {
		t.Fatal("no Peek at all: the view read nothing")
	}
	if got*2 > delivered {
		t.Fatalf("%d Peeks for %d events on %d streams of one view, want at most half: the streams do not share", got, delivered, streams)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
