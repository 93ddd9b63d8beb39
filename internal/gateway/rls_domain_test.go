package gateway_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/gateway"
)

// rlsClientWith is rlsClient with the service's logs in logs and its
// metrics in a registry of its own, which it returns.
func rlsClientWith(t *testing.T, f *fixture, logs *logBuffer) (rlsv3.RateLimitServiceClient, *prometheus.Registry) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, gateway.NewRateLimitService(f.catalogs(), f.mw,
		gateway.RateLimitServiceOptions{Logger: slog.New(slog.NewTextHandler(logs, nil)), Registerer: reg}))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), reg
}

func unknownCount(t *testing.T, reg *prometheus.Registry, what string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_envoy_unknown_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "what" && l.GetValue() == what {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestRateLimitServiceDomain(t *testing.T) {
	f := newFixture(t, nil)
	logs := &logBuffer{}
	c, reg := rlsClientWith(t, f, logs)
	ctx := context.Background()
	ask := func(domain string) (*rlsv3.RateLimitResponse, error) {
		return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: []*rlv3.RateLimitDescriptor{envoyDescriptor("GET", "/items/1", f.secret)}})
	}

	t.Run("SlugOrNameNamesTheService", func(t *testing.T) {
		for i, domain := range []string{"shop", "Shop"} {
			res, err := ask(domain)
			if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("domain %q: %v, %v", domain, res, err)
			}
			if got := res.GetStatuses()[0].GetLimitRemaining(); got != uint32(itemsLimit-1-i) {
				t.Errorf("domain %q: limit_remaining %d, want %d (the shop route's tier)", domain, got, itemsLimit-1-i)
			}
		}
	})

	t.Run("UnknownDomainIsNotFoundCountedAndLoggedOnce", func(t *testing.T) {
		for range 3 {
			res, err := ask("sluice")
			if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), `"sluice" names no Sluice service`) {
				t.Fatalf("unknown domain: %v, %v; want NotFound naming the domain", res, err)
			}
		}
		if n := unknownCount(t, reg, "domain"); n != 3 {
			t.Errorf("sluice_envoy_unknown_total{what=domain} = %v, want 3", n)
		}
		if n := strings.Count(logs.String(), "unknown domain"); n != 1 {
			t.Errorf("%d log lines for 3 unknown domains in a minute, want 1:\n%s", n, logs)
		}
		// Nothing was consumed: the next request on the shop domain has
		// what the first subtest left.
		res, err := ask("shop")
		if err != nil || res.GetStatuses()[0].GetLimitRemaining() != itemsLimit-3 {
			t.Errorf("after refused domains: %v, %v; want %d remaining", res, err, itemsLimit-3)
		}
	})
}

// TestRateLimitServiceOneCountPerRequest sends requests carrying two of
// Sluice's descriptors (and one that is not Sluice's): each request is one
// decision, so exactly the limit is admitted and each admission spends one.
func TestRateLimitServiceOneCountPerRequest(t *testing.T) {
	f := newFixture(t, nil)
	logs := &logBuffer{}
	c, reg := rlsClientWith(t, f, logs)
	ctx := context.Background()
	keyOnly := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: gateway.EntryAPIKey, Value: f.secret}}}
	other := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "secret-ish-value"}}}
	admitted := 0
	const sent = itemsLimit + 3
	for i := range sent {
		res, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shop",
			Descriptors: []*rlv3.RateLimitDescriptor{envoyDescriptor("GET", "/items/1", f.secret), keyOnly, other}})
		if err != nil {
			t.Fatal(err)
		}
		st := res.GetStatuses()
		if len(st) != 3 {
			t.Fatalf("%d statuses for 3 descriptors", len(st))
		}
		if st[2].GetCode() != rlsv3.RateLimitResponse_OK || st[2].GetCurrentLimit() != nil {
			t.Errorf("request %d: the other descriptor's status %v, want OK without a limit", i, st[2])
		}
		if st[0].GetCode() != res.GetOverallCode() || st[1].GetCode() != res.GetOverallCode() {
			t.Errorf("request %d: statuses %v and %v, overall %v: want one decision for both", i, st[0], st[1], res.GetOverallCode())
		}
		if res.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			admitted++
			for _, s := range st[:2] {
				if s.GetLimitRemaining() != uint32(itemsLimit-admitted) {
					t.Errorf("admission %d: limit_remaining %d, want %d", admitted, s.GetLimitRemaining(), itemsLimit-admitted)
				}
			}
		}
	}
	if admitted != itemsLimit {
		t.Errorf("admitted %d of %d requests with two descriptors each, want exactly %d", admitted, sent, itemsLimit)
	}

	// The descriptor that is not Sluice's was counted each time and
	// logged once, by its entry keys only.
	if n := unknownCount(t, reg, "descriptor"); n != sent {
		t.Errorf("sluice_envoy_unknown_total{what=descriptor} = %v, want %d", n, sent)
	}
	out := logs.String()
	if n := strings.Count(out, "none of Sluice's entries"); n != 1 || !strings.Contains(out, "entry_keys=generic_key") {
		t.Errorf("want one line naming generic_key, got:\n%s", out)
	}
	if strings.Contains(out, "secret-ish-value") || strings.Contains(out, f.secret) {
		t.Errorf("a descriptor's value was logged:\n%s", out)
	}
}
