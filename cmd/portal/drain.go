package main

import (
	"context"
	"net/http"
	"sync"
)

// drain is closed when the HTTP server starts shutting down.
type drain struct {
	once sync.Once
	ch   chan struct{}
}

func newDrain() *drain { return &drain{ch: make(chan struct{})} }

func (d *drain) close() { d.once.Do(func() { close(d.ch) }) }

// endOnDrain ends h's requests' contexts when the server starts shutting
// down: a long poll (the guards' GET /v1/policy waits up to 60 s for a
// change) then answers at once, as it would on a timeout, instead of
// holding the graceful shutdown until its deadline. Other requests are
// left to finish.
func endOnDrain(h http.Handler, d *drain) http.Handler {
	if d == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.Query().Has("wait") {
			h.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go func() {
			select {
			case <-d.ch:
				cancel()
			case <-ctx.Done():
			}
		}()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}
