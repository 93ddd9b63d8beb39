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
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout)
	stop()
	if err != nil {
		var ue usageError
		fmt.Fprintln(os.Stderr, "portal:", err)
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
