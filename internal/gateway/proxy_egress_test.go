package gateway_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// TestProxyNeverDialsTheMachine: the proxy reaches an upstream on
// loopback (upstreams are usually internal services), but an upstream
// stored as the unspecified address, which Linux would connect to this
// machine, or as a link-local metadata address, is not dialed whatever
// the stored URL says: the request is a 502 and reaches nothing.
func TestProxyNeverDialsTheMachine(t *testing.T) {
	f := newFixture(t, nil)
	api := newUpstream(t)
	f.setUpstream(t, api.URL)
	srv := f.proxyServer(t)
	// A path no route names: no tier counts it, so every attempt reaches the dial.
	target := srv.URL + gateway.ProxyPrefix + "shop/health"

	res := get(t, "GET", target, f.secret)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || api.served.Load() != 1 {
		t.Fatalf("loopback upstream: status %d, served %d; want 200, 1", res.StatusCode, api.served.Load())
	}

	_, port, _ := net.SplitHostPort(api.Listener.Addr().String())
	for _, upstream := range []string{
		"http://0.0.0.0:" + port,
		"http://0:" + port,
		"http://[::]:" + port,
		"http://[::ffff:0.0.0.0]:" + port,
		"http://169.254.169.254:" + port,
	} {
		// Stored past the form's check, as an older version would have.
		if _, err := f.pool.Exec(context.Background(), `UPDATE services SET upstream_url = $1 WHERE slug = 'shop'`, upstream); err != nil {
			t.Fatal(err)
		}
		f.waitFor(t, func(s *snapshot.Snapshot) bool {
			svc, ok := s.Services().Service("shop")
			return ok && svc.Upstream == upstream
		})
		res := get(t, "GET", target, f.secret)
		res.Body.Close()
		if res.StatusCode != http.StatusBadGateway {
			t.Errorf("upstream %s: status %d, want 502", upstream, res.StatusCode)
		}
	}
	if n := api.served.Load(); n != 1 {
		t.Fatalf("the server on 127.0.0.1 served %d requests, want only the first", n)
	}
}
