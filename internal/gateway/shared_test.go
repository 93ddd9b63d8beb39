package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestOneLimitWhicheverWayIn sends one key's requests for one route through
// every way in, in turn, on counters in Redis: the embedded middleware, the
// forward-auth check, Envoy's rate-limit service and the reverse proxy.
// Exactly the limit is admitted in total.
func TestOneLimitWhicheverWayIn(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, store)
	api := newUpstream(t)
	f.setUpstream(t, api.URL)
	check := f.checkServer(t)
	proxy := f.proxyServer(t)
	rls := rlsClient(t, f)
	embedded := http.NewServeMux()
	embedded.Handle(itemsRoute, f.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	ctx := context.Background()

	ways := []struct {
		name string
		send func(i int) bool // admitted?
	}{
		{"embedded", func(i int) bool {
			r := httptest.NewRequest("GET", "/items/"+strconv.Itoa(i), nil)
			r.Header.Set("Authorization", "Bearer "+f.secret)
			w := httptest.NewRecorder()
			embedded.ServeHTTP(w, r)
			return w.Code == http.StatusOK
		}},
		{"forward-auth", func(i int) bool {
			req, _ := http.NewRequest("GET", check.URL+gateway.CheckPath, nil)
			req.Header.Set("X-Forwarded-Method", "GET")
			req.Header.Set("X-Forwarded-Uri", "/items/"+strconv.Itoa(i))
			req.Header.Set("X-Forwarded-Host", "shop.example.com")
			req.Header.Set("X-API-Key", f.secret)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		}},
		{"envoy", func(i int) bool {
			res, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop",
				Descriptors: []*rlv3.RateLimitDescriptor{envoyDescriptor("GET", "/items/"+strconv.Itoa(i), f.secret)}})
			if err != nil {
				t.Fatal(err)
			}
			return res.GetOverallCode() == rlsv3.RateLimitResponse_OK
		}},
		{"proxy", func(i int) bool {
			res := get(t, "GET", proxy.URL+gateway.ProxyPrefix+"shop/items/"+strconv.Itoa(i), f.secret)
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		}},
	}
	admitted := map[string]int{}
	total := 0
	for i := range 4 * itemsLimit {
		w := ways[i%len(ways)]
		if w.send(i) {
			admitted[w.name]++
			total++
		}
	}
	if total != itemsLimit {
		t.Errorf("admitted %d in all (%v), want exactly %d", total, admitted, itemsLimit)
	}
	// Every way found the route: none admitted more than its share of
	// the first round, so none went unlimited.
	for name, n := range admitted {
		if n > 2 {
			t.Errorf("%s admitted %d: %v", name, n, admitted)
		}
	}
	// The first round reached every way in before the limit ran out.
	for _, w := range ways {
		if admitted[w.name] == 0 {
			t.Errorf("%s admitted nothing: %v", w.name, admitted)
		}
	}
}
