package gateway_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkEnvoyRatelimit runs envoyproxy/ratelimit, Envoy's reference
// rate-limit service, on the Redis the other benchmarks use, with one
// descriptor limit as high as theirs, under the same 64 callers, for
// comparison with BenchmarkRateLimitService. It needs the service's binary:
//
//	GOBIN=/tmp/rl go install github.com/envoyproxy/ratelimit/src/service_cmd@latest
//	ENVOY_RATELIMIT_BIN=/tmp/rl/service_cmd go test ./internal/gateway -run XXX -bench .
//
// and is skipped without it.
func BenchmarkEnvoyRatelimit(b *testing.B) {
	bin := os.Getenv("ENVOY_RATELIMIT_BIN")
	if bin == "" {
		b.Skip("ENVOY_RATELIMIT_BIN is not set")
	}
	redisURL, err := url.Parse(testenv.RedisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	_, prefix := testenv.Redis(b)
	// envoyproxy/ratelimit has no key prefix; a domain of its own keeps
	// its keys apart (they expire with their hour window).
	domain := "bench_" + prefix[len(prefix)-9:len(prefix)-1]
	dir := b.TempDir()
	conf := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		b.Fatal(err)
	}
	yaml := "domain: " + domain + "\ndescriptors:\n  - key: api_key\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1000000000\n"
	if err := os.WriteFile(filepath.Join(conf, "config.yaml"), []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	grpcPort, httpPort, debugPort := freePort(b), freePort(b), freePort(b)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL="+redisURL.Host, "RUNTIME_ROOT="+dir, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort), "HOST=127.0.0.1", "PORT="+strconv.Itoa(httpPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort))
	addr := "127.0.0.1:" + strconv.Itoa(grpcPort)
	start(b, cmd, addr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k1"}}}}}
	runCallers(b, func() error {
		res, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			return err
		}
		if res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			return errStatus(429)
		}
		return nil
	})
}
