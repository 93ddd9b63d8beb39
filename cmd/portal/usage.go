package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/metering"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// tierGaugeInterval is how often the per-tier gauges are recomputed.
const tierGaugeInterval = time.Minute

// meterInterval is how often due periods are closed into usage records.
const meterInterval = time.Minute

// usageParts are the request log's writer and reader (nil when
// PORTAL_REQUEST_LOG is false: the writer then stores nothing and only
// feeds the analytics), the analytics' reader and headroom, and the usage
// records' reader.
type usageParts struct {
	writer    *requestlog.Writer
	reader    *requestlog.Reader
	analytics *analytics.Reader
	headroom  *analytics.Headroom
	records   *metering.Reader
}

// startUsage starts the request log's writer, the analytics rollup it
// feeds, the per-tier gauges, the meter and, with a metering webhook, its
// sender, on bg; their final flushes run when bg ends, after the HTTP
// server has drained. peek reads limits for the headroom (a dashboard's
// store, never the request path's).
func startUsage(bg context.Context, wg *sync.WaitGroup, d serverDeps, metrics prometheus.Registerer, holder *snapshot.Holder, peek enforce.Store) (usageParts, error) {
	var sender *metering.Sender
	if u := d.cfg.Usage; u.MeterURL != "" {
		var err error
		// The default client follows no redirect; outbound requests go
		// through the portal's dialer once it has one (internal/egress).
		sender, err = metering.NewSender(d.pool, metering.SenderOptions{URL: u.MeterURL, Secret: []byte(u.MeterSecret),
			EventName: u.MeterEventName, Logger: d.logger, Registerer: metrics})
		if err != nil {
			return usageParts{}, fmt.Errorf("PORTAL_METER_WEBHOOK_URL: %w", err)
		}
	}
	rollup := analytics.NewRollup(d.pool, analytics.Options{Logger: d.logger, Registerer: metrics})
	opts := d.cfg.Usage.requestLogOptions()
	opts.Logger, opts.Registerer, opts.Observer = d.logger, metrics, rollup
	p := usageParts{analytics: analytics.NewReader(d.pool), records: metering.NewReader(d.pool)}
	if d.cfg.Usage.RequestLog {
		p.reader = requestlog.NewReader(d.pool)
	} else {
		opts.AdmitSample, opts.RejectSample = -1, -1
	}
	p.writer = requestlog.NewWriter(d.pool, opts)
	p.headroom = analytics.NewHeadroom(p.analytics, peek, func() analytics.Snapshot {
		if s := holder.Current(); s != nil {
			return s
		}
		return nil
	})
	gauges := analytics.NewTierGauges(p.headroom, 0, metrics, d.logger)
	// The rollup stops after the writer, whose final flush hands it the
	// last entries, so its own final flush writes them.
	rollupCtx, stopRollup := context.WithCancel(context.WithoutCancel(bg))
	wg.Add(3)
	go func() { defer wg.Done(); _ = rollup.Run(rollupCtx) }()
	go func() { defer wg.Done(); _ = p.writer.Run(bg); stopRollup() }()
	go func() { defer wg.Done(); _ = gauges.Run(bg, tierGaugeInterval) }()
	meter := metering.NewMeter(d.pool, metering.Options{Period: d.cfg.Usage.MeterPeriod, Logger: d.logger})
	wg.Add(1)
	go func() { defer wg.Done(); _ = meter.Run(bg, meterInterval) }()
	if sender != nil {
		wg.Add(1)
		go func() { defer wg.Done(); _ = sender.Run(bg) }()
	}
	return p, nil
}
