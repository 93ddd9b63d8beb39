package guard_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/guard"
)

// A complete service protected by a Sluice portal: the operator declared
// the service "items" with the route "GET /items/{id}" in the portal, gave
// its plans tiers on that route, and issued a service token for it. The
// guard shares the portal's Redis, so a key's limit is one limit across the
// portal, every gateway in front of it and every copy of this program.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	g, err := guard.New(ctx, guard.Options{
		PortalURL: "https://sluice.internal",
		Token:     os.Getenv("SLUICE_SERVICE_TOKEN"),
		Redis:     redis.NewClient(&redis.Options{Addr: "redis:6379"}),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s\n", r.PathValue("id"))
	})))
	srv := &http.Server{Addr: ":8080", Handler: mux}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// Without Redis the counters live in the program's memory: right for a
// single instance.
func ExampleNew_inMemory() {
	g, err := guard.New(context.Background(), guard.Options{
		PortalURL: "http://127.0.0.1:8080",
		Token:     os.Getenv("SLUICE_SERVICE_TOKEN"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	http.Handle("GET /search", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
}
