package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// exampleResolver gives every anonymous caller one tier on the items route.
type exampleResolver struct{}

func (exampleResolver) ResolveKey(string) (enforce.Caller, error) {
	return enforce.Caller{}, enforce.ErrInvalidKey
}

func (exampleResolver) Anonymous(ip netip.Addr) enforce.Caller {
	return enforce.Caller{Subject: "ip:" + ip.String(), Plan: "anonymous", Limits: []enforce.Limit{
		{Name: "anon-items", Algorithm: enforce.FixedWindow, Limit: 2, Window: time.Minute, Route: "GET /api/items/{id}"},
	}}
}

// Wrap each route's handler and register it on a ServeMux: the middleware
// reads the matched pattern, so every item shares the "anon-items" tier.
func ExampleMiddleware_Wrap() {
	clock := func() time.Time { return time.Unix(1724188740, 0) } // a minute boundary
	store := memstore.New(memstore.Options{Now: clock})
	mw := httplimit.NewMiddleware(store, exampleResolver{}, httplimit.Options{Now: clock})

	mux := http.NewServeMux()
	mux.Handle("GET /api/items/{id}", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, _ := httplimit.CallerFrom(r.Context())
		fmt.Fprintf(w, "item %s for %s", r.PathValue("id"), caller.Subject)
	})))

	for _, path := range []string{"/api/items/1", "/api/items/2", "/api/items/3"} {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "203.0.113.9:5123"
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit: "anon-items";r=1;t=60 Retry-After: ""
	// 200 RateLimit: "anon-items";r=0;t=60 Retry-After: ""
	// 429 RateLimit: "anon-items";r=0;t=60 Retry-After: "60"
}

// PORTAL_TRUSTED_PROXIES lists the proxies whose X-Forwarded-For is
// believed; the client is the rightmost address that is not one of them.
func ExampleClientIP() {
	trusted, err := httplimit.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/api/items/1", nil)
	r.RemoteAddr = "10.0.0.1:41000"                                    // the load balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.0.0.2") // 6.6.6.6 is spoofed
	fmt.Println(httplimit.ClientIP(r, trusted))

	r.RemoteAddr = "203.0.113.9:5123" // not a proxy: its header is ignored
	fmt.Println(httplimit.ClientIP(r, trusted))
	// Output:
	// 198.51.100.7
	// 203.0.113.9
}
