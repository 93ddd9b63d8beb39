// Command portal runs Sluice: the rate-limit control plane, its admin and
// developer UI, and the sample API it protects.
//
//	portal                      serve (embedded Postgres and in-memory counters by default)
//	portal migrate up|down|version|force
//
// Configuration comes from the environment, mirrored by flags; see
// `portal -h` and the README.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis prints every failed dial through a process-wide logger. The
	// portal reports Redis trouble itself, once and structured (startup
	// error, /readyz, the engine's failure mode), so those lines only repeat
	// it unstructured; main is the one place allowed to set that global.
	redis.SetLogger(quietRedisLog{})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout)
	stop()
	if err != nil {
		var ue usageError
		// One line per problem, each prefixed, so every bad setting reads
		// as its own message.
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "portal:", line)
		}
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		var coded interface{ ExitCode() int }
		if errors.As(err, &coded) {
			os.Exit(coded.ExitCode())
		}
		os.Exit(1)
	}
}

// quietRedisLog drops go-redis's internal log lines.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}
