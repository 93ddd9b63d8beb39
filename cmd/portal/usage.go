package main

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/requestlog"
)

// requestLogParts are the request log's writer (nil when
// PORTAL_REQUEST_LOG is false) and its reader for the pages.
type requestLogParts struct {
	writer *requestlog.Writer
	reader *requestlog.Reader
}

// startRequestLog starts the request log's writer on bg; its final flush
// runs when bg ends, after the HTTP server has drained.
func startRequestLog(bg context.Context, wg *sync.WaitGroup, d serverDeps, metrics prometheus.Registerer) requestLogParts {
	if !d.cfg.Usage.RequestLog {
		return requestLogParts{}
	}
	opts := d.cfg.Usage.requestLogOptions()
	opts.Logger, opts.Registerer = d.logger, metrics
	w := requestlog.NewWriter(d.pool, opts)
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.Run(bg) }()
	return requestLogParts{writer: w, reader: requestlog.NewReader(d.pool)}
}
