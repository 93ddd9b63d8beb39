package main

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"
)

// debugProfileMax is the longest CPU profile or trace the debug server
// records: its write timeout has to outlast the recording.
const debugProfileMax = 5 * time.Minute

// newDebugServer serves Go's profiler on its own listener
// (PORTAL_DEBUG_ADDR). The handlers are mounted on a mux of its own rather
// than on http.DefaultServeMux, where importing net/http/pprof also puts
// them: nothing in the portal serves the default mux, so the profiler is
// reachable only on this address, never on the public one.
func newDebugServer(logger *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      debugProfileMax + 10*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
