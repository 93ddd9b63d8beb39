package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/requestlog"
)

// logTo makes the fixture's middleware log every decision to a request
// log writer on the fixture's Postgres that keeps every entry (no
// sampling), as cmd/portal wires it; the test flushes it itself.
func (f *fixture) logTo(t *testing.T) *requestlog.Writer {
	t.Helper()
	w := requestlog.NewWriter(f.pool, requestlog.Options{AdmitSample: 1, RejectSample: 1})
	f.mw = httplimit.NewMiddleware(f.store, f.holder, httplimit.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Logger:         f.logger,
		RequestLog:     w,
	})
	return w
}

// TestEveryWayInLogsItsDecisions drives real requests through each way in
// (the embedded middleware, /v1/check, the reverse proxy, Envoy's
// rate-limit service) until the key's tier rejects, then finds each
// admission and rejection in Postgres with what the way in saw: the
// protected API's status and latency where Sluice serves the response,
// none where the gateway does, and the layer and Retry-After of each
// rejection. The key appears by id (and its prefix), never its secret.
func TestEveryWayInLogsItsDecisions(t *testing.T) {
	f := newFixture(t, nil)
	log := f.logTo(t)
	ctx := context.Background()

	// The embedded middleware, on the portal's own mux.
	mux := http.NewServeMux()
	mux.Handle(itemsRoute, f.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond) // a latency the log's microseconds hold
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "made")
	})))
	embedded := httptest.NewServer(mux)
	t.Cleanup(embedded.Close)
	// The reverse proxy in front of an upstream.
	api := newUpstream(t)
	f.setUpstream(t, api.URL)
	// Each way in through its own copy of the middleware, as cmd/portal
	// wires them (Middleware.WayIn names the way in in the log).
	proxy := httptest.NewServer(gateway.Listener(f.catalogs(), gateway.NewProxy(f.catalogs(), f.mw.WayIn(httplimit.WayInProxy), nil, f.logger)))
	t.Cleanup(proxy.Close)
	// Forward auth and Envoy.
	checkMux := http.NewServeMux()
	checkMux.Handle(gateway.CheckPath, gateway.NewCheck(f.catalogs(), f.mw.WayIn(httplimit.WayInCheck), f.logger))
	check := httptest.NewServer(checkMux)
	t.Cleanup(check.Close)
	envoy := f.mw
	f.mw = f.mw.WayIn(httplimit.WayInEnvoy)
	rls := rlsClient(t, f)
	f.mw = envoy

	// Admissions are logged once the answer has gone out; a server serves
	// one connection's requests in turn, so with one connection per
	// server, the answer to a later request means the earlier one is
	// logged.
	one := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(one.CloseIdleConnections)
	send := func(t *testing.T, url, key string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := one.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return statusOf(t, res)
	}
	ways := []struct {
		way string
		// ask sends one request on the items route with f's key and
		// returns the status the way in answered (for Envoy, 200 or 429).
		ask func(t *testing.T, i int) int
		// sees says Sluice serves the response: the entry has the
		// protected API's status.
		sees     bool
		upstream int
	}{
		{requestlog.WayMiddleware, func(t *testing.T, i int) int {
			return send(t, embedded.URL+"/items/"+strconv.Itoa(i), f.secret)
		}, true, http.StatusCreated},
		{requestlog.WayCheck, func(t *testing.T, i int) int {
			req, _ := http.NewRequest("GET", check.URL+gateway.CheckPath, nil)
			req.Header.Set("X-Forwarded-Method", "GET")
			req.Header.Set("X-Forwarded-Uri", "/items/"+strconv.Itoa(i))
			req.Header.Set("X-Forwarded-Host", "shop.example.com")
			req.Header.Set("Authorization", "Bearer "+f.secret)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			return statusOf(t, res)
		}, false, 0},
		{requestlog.WayProxy, func(t *testing.T, i int) int {
			return send(t, proxy.URL+gateway.ProxyPrefix+"shop/items/"+strconv.Itoa(i), f.secret)
		}, true, http.StatusOK},
		{requestlog.WayEnvoy, func(t *testing.T, i int) int {
			res, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop",
				Descriptors: []*rlv3.RateLimitDescriptor{envoyDescriptor("GET", "/items/"+strconv.Itoa(i), f.secret)}})
			if err != nil {
				t.Fatal(err)
			}
			if res.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				return http.StatusTooManyRequests
			}
			return http.StatusOK
		}, false, 0},
	}
	// One admission each (4 of the tier's 5), the fifth through the
	// middleware, then one rejection each.
	for i, w := range ways {
		if got := w.ask(t, i); got != w.upstream && !(w.upstream == 0 && got == http.StatusOK) {
			t.Fatalf("%s: admission answered %d", w.way, got)
		}
	}
	if got := ways[0].ask(t, 9); got != http.StatusCreated {
		t.Fatalf("fifth admission answered %d", got)
	}
	for i, w := range ways {
		if got := w.ask(t, 10+i); got != http.StatusTooManyRequests {
			t.Fatalf("%s: over the limit answered %d", w.way, got)
		}
	}
	// A bad key through the proxy: a 401 logged by the caller's address.
	if got := send(t, proxy.URL+gateway.ProxyPrefix+"shop/items/1", "sk_live_nope"); got != http.StatusUnauthorized {
		t.Fatalf("bad key answered %d", got)
	}
	for _, srv := range []string{embedded.URL, proxy.URL} {
		send(t, srv+"/after", "") // the answers before this one are logged
	}
	if err := log.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	reader := requestlog.NewReader(f.pool)
	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	for _, way := range ways {
		t.Run(way.way, func(t *testing.T) {
			rows, _, err := reader.List(ctx, requestlog.Filter{From: from, To: to, WayIn: way.way, KeyID: f.key.ID}, requestlog.Cursor{}, 100)
			if err != nil {
				t.Fatal(err)
			}
			wantAdmitted := 1
			if way.way == requestlog.WayMiddleware {
				wantAdmitted = 2
			}
			var admitted, rejected int
			for _, r := range rows {
				if r.Plan != "shop" || r.Route != itemsRoute || r.UserID != f.key.UserID || r.KeyPrefix != f.key.Prefix || r.Address != "" || r.Weight != 1 {
					t.Errorf("row %+v: want plan shop, route %q, user %d, key prefix %q, no address, weight 1", r, itemsRoute, f.key.UserID, f.key.Prefix)
				}
				if strings.Contains(r.KeyPrefix+r.KeyName, f.secret) {
					t.Errorf("row %+v carries the key's secret", r)
				}
				switch r.Outcome {
				case "admitted":
					admitted++
					if r.Layer != "" || r.RetryAfter != 0 {
						t.Errorf("admission %+v names a layer or a Retry-After", r)
					}
					if way.sees {
						if r.Status != way.upstream || r.UpstreamStatus != way.upstream || r.Latency <= 0 ||
							way.way == requestlog.WayMiddleware && r.Latency < time.Millisecond {
							t.Errorf("admission %+v: want status and upstream %d and a latency", r, way.upstream)
						}
					} else if r.Status != 0 || r.UpstreamStatus != 0 || r.Latency != 0 {
						t.Errorf("admission %+v: the gateway serves the response, want no status or latency", r)
					}
				case "rejected":
					rejected++
					if r.Layer != "shop-items" || r.RetryAfter < 1 || r.UpstreamStatus != 0 || r.Latency != 0 {
						t.Errorf("rejection %+v: want layer shop-items, a Retry-After, no upstream", r)
					}
					if way.way != requestlog.WayEnvoy && r.Status != http.StatusTooManyRequests {
						t.Errorf("rejection %+v: want status 429", r)
					}
				default:
					t.Errorf("row %+v: unexpected outcome", r)
				}
			}
			if admitted != wantAdmitted || rejected != 1 {
				t.Errorf("%d admitted and %d rejected rows, want %d and 1", admitted, rejected, wantAdmitted)
			}
		})
	}
	t.Run("UnauthorizedByAddress", func(t *testing.T) {
		rows, _, err := reader.List(ctx, requestlog.Filter{From: from, To: to, Outcome: requestlog.Unauthorized}, requestlog.Cursor{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 {
			t.Fatalf("%d unauthorized rows, want 1", len(rows))
		}
		r := rows[0]
		if r.WayIn != requestlog.WayProxy || r.Status != http.StatusUnauthorized || r.KeyID != 0 || r.Address != "127.0.0.0/24" || r.Route != itemsRoute {
			t.Errorf("unauthorized row %+v: want proxy, 401, no key, address 127.0.0.0/24", r)
		}
	})
}

// statusOf reads and closes res, returning its status.
func statusOf(t *testing.T, res *http.Response) int {
	t.Helper()
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}
