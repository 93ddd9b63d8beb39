package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/client/internal/limitserver"
)

// A client with the defaults: up to 5 attempts, full-jitter exponential
// backoff from 100ms, Retry-After honoured, at most 30s of waiting per call.
func Example() {
	api := httptest.NewServer(limitserver.New(100, time.Second))
	defer api.Close()

	c := client.New(client.Config{Key: "sk_live_your_key"})
	resp, err := c.Get(context.Background(), api.URL+"/api/search?q=otters")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), string(body))
	// Output: 200 100 {"ok":true}
}

// Many goroutines sharing one key share one Client with Pace set: it spends
// the X-RateLimit-Remaining budget and then waits for X-RateLimit-Reset, so
// the server rarely has to say 429.
func ExampleConfig_pace() {
	api := httptest.NewServer(limitserver.New(5, time.Second))
	defer api.Close()

	c := client.New(client.Config{Key: "sk_live_your_key", Pace: true})
	got429 := 0
	for range 8 {
		resp, err := c.Get(context.Background(), api.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			got429++
		}
	}
	fmt.Println("429s:", got429)
	// Output: 429s: 0
}

// A POST is retried with its body replayed: http.NewRequest sets GetBody for
// strings, bytes readers and buffers. A context deadline bounds the whole
// call, waits included.
func ExampleClient_Do() {
	api := httptest.NewServer(limitserver.New(10, time.Second))
	defer api.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/api/reports",
		strings.NewReader(`{"kind":"weekly"}`))
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")

	c := client.New(client.Config{Key: "sk_live_your_key", Jitter: client.EqualJitter, MaxAttempts: 8})
	resp, err := c.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output: 200
}

// Retry-After carries either seconds or an HTTP date.
func ExampleParseRetryAfter() {
	now := time.Date(2026, 10, 21, 7, 28, 0, 0, time.UTC)
	d, ok := client.ParseRetryAfter("37", now)
	fmt.Println(d, ok)
	d, ok = client.ParseRetryAfter("Wed, 21 Oct 2026 07:28:05 GMT", now)
	fmt.Println(d, ok)
	// Output:
	// 37s true
	// 5s true
}
