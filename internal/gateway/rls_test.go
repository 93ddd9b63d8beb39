package gateway_test

import (
	"context"
	"encoding/json"
	"net"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/gateway"
)

// rlsClient serves the fixture's RateLimitService on a real TCP listener
// and returns a client built from go-control-plane's generated code.
func rlsClient(t testing.TB, f *fixture) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, gateway.NewRateLimitService(f.catalogs(), f.mw, gateway.RateLimitServiceOptions{Logger: f.logger}))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// envoyDescriptor is what docs/gateways/envoy.yaml's rate_limits actions
// send for a request.
func envoyDescriptor(method, path, key string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: gateway.EntryMethod, Value: method},
		{Key: gateway.EntryPath, Value: path},
		{Key: gateway.EntryHost, Value: "shop.example.com"},
		{Key: gateway.EntryRemoteAddress, Value: "203.0.113.9"},
	}}
	if key != "" {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: gateway.EntryAuthorization, Value: "Bearer " + key})
	}
	return d
}

func headerMap(res *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range res.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

func TestRateLimitService(t *testing.T) {
	f := newFixture(t, nil)
	c := rlsClient(t, f)
	ctx := context.Background()
	ask := func(hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		res, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: ds, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetStatuses()) != len(ds) {
			t.Fatalf("%d statuses for %d descriptors", len(res.GetStatuses()), len(ds))
		}
		return res
	}

	t.Run("ExactAdmissionsStatusesAndHeaders", func(t *testing.T) {
		// Two hits, then one, one, one: 5 spent; the next is over.
		costs := []uint32{2, 0, 1, 1}
		spent := 0
		for _, hits := range costs {
			res := ask(hits, envoyDescriptor("GET", "/items/1?x=1", f.secret))
			spent += int(max(hits, 1))
			st := res.GetStatuses()[0]
			if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("after %d spent: %v", spent, res)
			}
			if got := st.GetLimitRemaining(); got != uint32(itemsLimit-spent) {
				t.Errorf("limit_remaining = %d, want %d", got, itemsLimit-spent)
			}
			cl := st.GetCurrentLimit()
			if cl.GetRequestsPerUnit() != itemsLimit || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || cl.GetName() != "shop-items" || cl.GetUnitMultiplier() != nil {
				t.Errorf("current_limit = %v, want 5 per HOUR named shop-items", cl)
			}
			if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d.Hours() > 1 {
				t.Errorf("duration_until_reset = %v", d)
			}
			h := headerMap(res)
			for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
				if h[name] == "" {
					t.Errorf("response_headers_to_add lacks %s: %v", name, h)
				}
			}
		}
		res := ask(1, envoyDescriptor("GET", "/items/2", f.secret))
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || res.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("sixth hit: %v, want OVER_LIMIT", res)
		}
		if h := headerMap(res); h["Retry-After"] == "" || h["X-RateLimit-Remaining"] != "0" {
			t.Errorf("OVER_LIMIT headers %v: want Retry-After and no remaining", h)
		}
		var body struct{ Error string }
		if err := json.Unmarshal(res.GetRawBody(), &body); err != nil || body.Error != "rate_limit_exceeded" {
			t.Errorf("raw_body %q", res.GetRawBody())
		}
	})

	t.Run("HitsBeyondWhatRemainsConsumeNothing", func(t *testing.T) {
		f := newFixture(t, nil)
		c := rlsClient(t, f)
		res, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", HitsAddend: itemsLimit + 1,
			Descriptors: []*rlv3.RateLimitDescriptor{envoyDescriptor("GET", "/items/1", f.secret)}})
		if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%d hits on a limit of %d: %v, %v", itemsLimit+1, itemsLimit, res, err)
		}
		res, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop", HitsAddend: itemsLimit,
			Descriptors: []*rlv3.RateLimitDescriptor{envoyDescriptor("GET", "/items/1", f.secret)}})
		if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("then exactly the limit: %v, %v; want OK with 0 remaining", res, err)
		}
	})

	t.Run("RouteEntryAndOtherRoutes", func(t *testing.T) {
		route := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: gateway.EntryRoute, Value: "POST /orders"}, {Key: gateway.EntryAPIKey, Value: f.secret}}}
		res := ask(1, route)
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetCurrentLimit() != nil {
			t.Errorf("a route without a tier: %v, want OK with no limit", res)
		}
	})

	t.Run("UnknownDescriptorIsOKAndUnlimited", func(t *testing.T) {
		other := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "x"}}}
		res := ask(1, other)
		st := res.GetStatuses()[0]
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil || len(res.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("unknown descriptor: %v", res)
		}
	})

	t.Run("BadKeyIsOverLimit", func(t *testing.T) {
		res := ask(1, envoyDescriptor("POST", "/orders", "sk_live_unknown"))
		var body struct{ Error string }
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || json.Unmarshal(res.GetRawBody(), &body) != nil || body.Error != "invalid_api_key" {
			t.Errorf("bad key: %v", res)
		}
		if headerMap(res)["WWW-Authenticate"] == "" {
			t.Error("bad key without WWW-Authenticate")
		}
	})
}
