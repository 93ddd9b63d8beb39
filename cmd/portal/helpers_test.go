package main

import (
	"log/slog"
	"net/http"
	"strings"
)

// recorder is a minimal http.ResponseWriter for handler tests.
type recorder struct {
	header http.Header
	status int
	body   strings.Builder
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.body.Write(b)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
