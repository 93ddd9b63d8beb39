package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/gateway"
)

// proxyServer is the reverse proxy's own listener (PORTAL_PROXY_ADDR).
func (f *fixture) proxyServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(gateway.Listener(f.catalogs(), gateway.NewProxy(f.catalogs(), f.mw, nil, f.logger)))
	t.Cleanup(srv.Close)
	return srv
}

// consoleServer is the console's listener as cmd/portal builds it: the host
// router around the portal's own routes, and ProxyPrefix answered by
// origin (redirected to the proxy's listener, or 404 without one).
func (f *fixture) consoleServer(t *testing.T, origin gateway.ProxyOrigin) *httptest.Server {
	t.Helper()
	p := gateway.NewProxy(f.catalogs(), f.mw, nil, f.logger)
	mux := http.NewServeMux()
	mux.Handle(gateway.ProxyPrefix, origin.ConsoleProxyPath())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the portal itself") })
	srv := httptest.NewServer(gateway.ByHost(f.catalogs(), p, mux))
	t.Cleanup(srv.Close)
	return srv
}

func TestProxyEnforces(t *testing.T) {
	f := newFixture(t, nil)
	api := newUpstream(t)
	f.setUpstream(t, api.URL)
	srv := f.proxyServer(t)

	t.Run("ByPathPrefix", func(t *testing.T) {
		throughGateway(t, f, api, srv.URL+gateway.ProxyPrefix+"shop")
	})

	t.Run("ByHostName", func(t *testing.T) {
		// The tier is spent: the host name reaches the same route.
		req, _ := http.NewRequest("GET", srv.URL+"/items/3", nil)
		req.Host = "shop.example.com"
		req.Header.Set("X-API-Key", f.secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusTooManyRequests {
			t.Errorf("by host name after the tier is spent: status %d, want 429", res.StatusCode)
		}
		res = get(t, "GET", srv.URL+"/items/3", "")
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound || strings.Contains(string(b), "served GET") {
			t.Errorf("another host on the proxy's listener: status %d body %q, want 404", res.StatusCode, b)
		}
	})

	t.Run("UnknownService", func(t *testing.T) {
		res := get(t, "GET", srv.URL+gateway.ProxyPrefix+"nope/items/1", "")
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("status %d, want 404", res.StatusCode)
		}
	})
}

func TestProxyStreamsLargeResponses(t *testing.T) {
	f := newFixture(t, nil)
	const size = 64 << 20
	chunk := bytes.Repeat([]byte("sluice!\n"), 4096)
	firstSeen := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(chunk)
		w.(http.Flusher).Flush()
		// Hold the rest back until the client has the first chunk: a
		// proxy that buffered the response would never deliver it.
		select {
		case <-firstSeen:
		case <-r.Context().Done():
			return
		}
		for sent := len(chunk); sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(api.Close)
	f.setUpstream(t, api.URL)
	srv := f.proxyServer(t)

	res := get(t, "GET", srv.URL+gateway.ProxyPrefix+"shop/files/big.bin", f.secret)
	defer res.Body.Close()
	first := make([]byte, len(chunk))
	if _, err := io.ReadFull(res.Body, first); err != nil {
		t.Fatal(err)
	}
	close(firstSeen)
	h := sha256.New()
	h.Write(first)
	n, err := io.Copy(h, res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if total := n + int64(len(first)); total != size {
		t.Errorf("received %d bytes, want %d", total, size)
	}
	want := sha256.New()
	for sent := 0; sent < size; sent += len(chunk) {
		want.Write(chunk)
	}
	if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Error("the body arrived altered")
	}
}

func TestProxyUpstreamDown(t *testing.T) {
	f := newFixture(t, nil)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // nothing listens there any more
	f.setUpstream(t, down.URL)
	srv := f.proxyServer(t)

	res := get(t, "GET", srv.URL+gateway.ProxyPrefix+"shop/items/1", f.secret)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", res.StatusCode)
	}
	if got := res.Header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(itemsLimit-1) {
		t.Errorf("X-RateLimit-Remaining on the 502 = %q, want %d", got, itemsLimit-1)
	}
	// The failed request was counted once: a peek sees exactly one spent.
	caller, err := f.holder.ResolveKey(f.secret)
	if err != nil {
		t.Fatal(err)
	}
	var tier []enforce.Limit
	for _, l := range caller.Limits {
		if l.Route == itemsRoute {
			tier = append(tier, l)
		}
	}
	d, err := f.store.Peek(context.Background(), enforce.Request{Subject: caller.Subject, Key: caller.Key, Route: itemsRoute, Limits: tier})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Layers[0].Remaining; got != itemsLimit-1 {
		t.Errorf("remaining after one failed proxied request = %d, want %d", got, itemsLimit-1)
	}
}
