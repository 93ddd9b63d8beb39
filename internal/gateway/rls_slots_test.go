package gateway_test

import (
	"context"
	"net"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/gateway"
)

// TestRateLimitServiceHoldsSlotsForTheGatewayLease: Envoy never says when
// a request ends, so a concurrency slot taken through the service lasts
// the gateway's slot lease: a tier of 1 refuses a second request within
// it (releasing at once would let every request through), and admits
// again once it has run out. The admitted request's caller reaches the
// upstream in request_headers_to_add, never the key.
func TestRateLimitServiceHoldsSlotsForTheGatewayLease(t *testing.T) {
	f := newFixture(t, nil)
	withOrdersInFlight(t, f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, gateway.NewRateLimitService(f.catalogs(), f.mw.WithSlotLease(time.Second), gateway.RateLimitServiceOptions{Logger: f.logger}))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := rlsv3.NewRateLimitServiceClient(conn)
	ask := func() *rlsv3.RateLimitResponse {
		res, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{envoyDescriptor("POST", "/orders", f.secret)}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := ask()
	if first.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first: %v", first)
	}
	added := map[string]string{}
	for _, h := range first.GetRequestHeadersToAdd() {
		added[h.GetKey()] = h.GetValue()
	}
	if added[gateway.HeaderKeyID] == "" || added[gateway.HeaderPlan] == "" || added[gateway.HeaderDeveloperID] == "" {
		t.Errorf("request_headers_to_add %v: want the key id, developer and plan", added)
	}
	for _, v := range added {
		if v == f.secret {
			t.Errorf("request_headers_to_add carries the key: %v", added)
		}
	}
	if res := ask(); res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second within the lease: %v, want OVER_LIMIT", res.GetOverallCode())
	} else if len(res.GetRequestHeadersToAdd()) != 0 {
		t.Errorf("a refusal adds request headers: %v", res.GetRequestHeadersToAdd())
	}
	deadline := time.Now().Add(10 * time.Second)
	for ask().GetOverallCode() != rlsv3.RateLimitResponse_OK {
		if time.Now().After(deadline) {
			t.Fatal("the slot was still held 10 s after a lease of 1 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
