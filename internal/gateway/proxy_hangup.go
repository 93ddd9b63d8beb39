package gateway

import (
	"context"
	"net/http"
	"sync/atomic"
)

// outlivingClient returns w and r for proxying a request that holds
// concurrency slots: the upstream request no longer ends when the client
// hangs up (the upstream would go on working on it unseen), and the
// response is read to its end, written to the client while it is there
// and dropped after, so the handler (and with it the slots) returns only
// once the upstream has answered. Other requests are proxied as they are.
func outlivingClient(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	return &afterHangUp{ResponseWriter: w, client: r.Context()}, r.WithContext(context.WithoutCancel(r.Context()))
}

// afterHangUp is a ResponseWriter that swallows what is written once the
// client is gone, so the reverse proxy copies the upstream's answer to its
// end instead of giving up on the first failed write.
type afterHangUp struct {
	http.ResponseWriter
	client context.Context
	gone   atomic.Bool
}

func (a *afterHangUp) out() bool {
	if a.gone.Load() {
		return true
	}
	if a.client.Err() != nil {
		a.gone.Store(true)
		return true
	}
	return false
}

func (a *afterHangUp) Write(p []byte) (int, error) {
	if a.out() {
		return len(p), nil
	}
	if _, err := a.ResponseWriter.Write(p); err != nil {
		a.gone.Store(true)
	}
	return len(p), nil
}

func (a *afterHangUp) WriteHeader(code int) {
	if !a.out() {
		a.ResponseWriter.WriteHeader(code)
	}
}

// FlushError flushes to the client while it is there.
func (a *afterHangUp) FlushError() error {
	if a.out() {
		return nil
	}
	if err := http.NewResponseController(a.ResponseWriter).Flush(); err != nil {
		a.gone.Store(true)
	}
	return nil
}
