package main

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestRunServesTheWaysIn starts the portal with PORTAL_GRPC_ADDR and checks
// that every way in for other APIs is wired: /v1/check on the demo service's
// routes, Envoy's rate-limit service, the policy feed and the proxy.
func TestRunServesTheWaysIn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := l.Addr().String()
	l.Close()
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_GRPC_ADDR"] = grpcAddr
	p := startPortal(t, env)

	req, _ := http.NewRequest("GET", p.url+"/v1/check", nil)
	req.Header.Set("X-Original-Method", "GET")
	req.Header.Set("X-Original-URI", "/api/items/1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Sluice-Route") != "demo GET /api/items/{id}" || res.Header.Get("RateLimit-Policy") == "" {
		t.Errorf("/v1/check: status %d headers %v", res.StatusCode, res.Header)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: "demo", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: "method", Value: "GET"}, {Key: "path", Value: "/api/items/1"}, {Key: "remote_address", Value: "192.0.2.7"}}}}})
	if err != nil || rl.GetOverallCode() != rlsv3.RateLimitResponse_OK || rl.GetStatuses()[0].GetCurrentLimit() == nil {
		t.Errorf("ShouldRateLimit = %v, %v", rl, err)
	}

	for path, want := range map[string]int{"/v1/policy": http.StatusUnauthorized, "/proxy/nope/x": http.StatusNotFound} {
		if status, body := get(t, p.url+path); status != want {
			t.Errorf("GET %s: status %d body %q, want %d", path, status, body, want)
		}
	}

	// Each way in's decisions are told apart on /metrics (way_in): the
	// check's, Envoy's and the sample API's (the embedded middleware's).
	if status, body := get(t, p.url+"/api/items/1"); status != http.StatusOK {
		t.Errorf("GET /api/items/1: status %d body %q", status, body)
	}
	m := metricsRE.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no metrics address printed:\n%s", p.out)
	}
	_, scrape := get(t, m[1])
	for _, way := range []string{"check", "envoy", "middleware"} {
		re := regexp.MustCompile(`(?m)^sluice_enforce_requests_total\{outcome="admitted",plan="[^"]*",route="GET /api/items/\{id\}",way_in="` + way + `"\} 1$`)
		if !re.MatchString(scrape) {
			t.Errorf("/metrics has no admitted decision with way_in=%q:\n%s", way, grepLines(scrape, "sluice_enforce_requests_total"))
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, strings.TrimSuffix(line, "\n"))
		}
	}
	return strings.Join(out, "\n")
}
