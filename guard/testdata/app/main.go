// Command app is a Go service in a module of its own that protects its
// routes with github.com/sluicehq/sluice/guard, as a user's program would.
// guard's tests build and run it against a portal.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/guard"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	opts := guard.Options{PortalURL: os.Getenv("SLUICE_URL"), Token: os.Getenv("SLUICE_SERVICE_TOKEN"),
		RedisPrefix: os.Getenv("SLUICE_REDIS_PREFIX")}
	if addr := os.Getenv("SLUICE_REDIS_ADDR"); addr != "" {
		opts.Redis = redis.NewClient(&redis.Options{Addr: addr})
	}
	g, err := guard.New(ctx, opts)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s\n", r.PathValue("id"))
	})))
	ln, err := net.Listen("tcp", os.Getenv("APP_ADDR"))
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
