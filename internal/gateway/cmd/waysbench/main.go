// Command waysbench drives one way in to a running portal (or
// envoyproxy/ratelimit) for a fixed time with N callers and prints
// "decisions/s server_cpu_µs_per_decision errors", the CPU read from the
// server's /proc/<pid>/stat, so the client's own work is not counted. The
// figures of docs/benchmarks.md ("Portal as its own process") came from
// rounds of it, one mode after another, order rotated each round:
//
//	waysbench -mode rls   -addr 127.0.0.1:8081 -pid $PORTAL -key $KEY   # Envoy's service
//	waysbench -mode mw    -addr 127.0.0.1:8080 -pid $PORTAL -key $KEY   # GET /api/items/1
//	waysbench -mode check -addr 127.0.0.1:8080 -pid $PORTAL -key $KEY   # /v1/check
//	waysbench -mode erl   -addr 127.0.0.1:8082 -pid $ERL -domain bench -key $KEY
//
// erl sends envoyproxy/ratelimit the two descriptors that count what the
// portal's plan-wide and route limits count; erl1 only the first.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func ticks(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		log.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

func main() {
	mode := flag.String("mode", "", "rls|erl|mw|check")
	addr := flag.String("addr", "", "host:port")
	key := flag.String("key", "", "api key")
	domain := flag.String("domain", "demo", "the rate-limit domain: for the portal, the slug of the service the route is declared in")
	pid := flag.Int("pid", 0, "server pid")
	conc := flag.Int("c", 64, "callers")
	dur := flag.Duration("d", 5*time.Second, "")
	warm := flag.Duration("w", time.Second, "")
	flag.Parse()

	var call func() error
	switch *mode {
	case "rls", "erl", "erl1":
		conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			log.Fatal(err)
		}
		c := rlsv3.NewRateLimitServiceClient(conn)
		var req *rlsv3.RateLimitRequest
		if *mode == "rls" {
			req = &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*rlv3.RateLimitDescriptor{{
				Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "route", Value: "GET /api/items/{id}"}, {Key: "api_key", Value: *key}}}}}
		} else if *mode == "erl1" {
			req = &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*rlv3.RateLimitDescriptor{
				{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: *key}}}}}
		} else {
			req = &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*rlv3.RateLimitDescriptor{
				{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: *key}}},
				{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "route", Value: "GET /api/items/{id}"}, {Key: "api_key", Value: *key}}}}}
		}
		call = func() error {
			res, err := c.ShouldRateLimit(context.Background(), req)
			if err != nil {
				return err
			}
			if res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				return fmt.Errorf("code %v", res.GetOverallCode())
			}
			if *mode == "rls" && (len(res.GetStatuses()) != 1 || res.GetStatuses()[0].GetCurrentLimit() == nil) {
				return fmt.Errorf("no limit in status: %v", res)
			}
			return nil
		}
	case "mw", "check":
		tr := &http.Transport{MaxIdleConnsPerHost: *conc, MaxConnsPerHost: *conc}
		hc := &http.Client{Transport: tr}
		url := "http://" + *addr + "/api/items/1"
		if *mode == "check" {
			url = "http://" + *addr + "/v1/check"
		}
		call = func() error {
			r, _ := http.NewRequest("GET", url, nil)
			r.Header.Set("Authorization", "Bearer "+*key)
			if *mode == "check" {
				r.Header.Set("X-Forwarded-Method", "GET")
				r.Header.Set("X-Forwarded-Uri", "/api/items/1")
			}
			res, err := hc.Do(r)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || res.Header.Get("RateLimit-Policy") == "" {
				return fmt.Errorf("status %d policy %q", res.StatusCode, res.Header.Get("RateLimit-Policy"))
			}
			return nil
		}
	default:
		log.Fatalf("-mode %q: want rls, erl, erl1, mw or check", *mode)
	}
	run := func(d time.Duration) (int64, int64, error) {
		var n, bad atomic.Int64
		var first atomic.Value
		stop := time.Now().Add(d)
		var wg sync.WaitGroup
		for i := 0; i < *conc; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					if err := call(); err != nil {
						bad.Add(1)
						first.CompareAndSwap(nil, err)
					} else {
						n.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		e, _ := first.Load().(error)
		return n.Load(), bad.Load(), e
	}
	run(*warm)
	t0 := ticks(*pid)
	start := time.Now()
	n, bad, err := run(*dur)
	el := time.Since(start)
	t1 := ticks(*pid)
	cpuUS := float64(t1-t0) / 100 * 1e6 // CLK_TCK 100
	fmt.Printf("%.0f %.1f %d\n", float64(n)/el.Seconds(), cpuUS/float64(n+bad), bad)
	if err != nil {
		fmt.Fprintln(os.Stderr, "first error:", err)
	}
}
