package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/keynotices"
	"github.com/sluicehq/sluice/internal/mail"
	"github.com/sluicehq/sluice/web"
)

// accountMailer is the sender of the account emails (sign-up confirmation,
// reset links), nil unless both PORTAL_SMTP_URL and PORTAL_PUBLIC_URL are
// set: a link must never take its host from a request's Host header.
func accountMailer(d serverDeps, m *mail.Sender) web.Mailer {
	if m == nil {
		return nil
	}
	if d.cfg.PublicURL == "" {
		d.logger.Warn("PORTAL_SMTP_URL is set without PORTAL_PUBLIC_URL: alerts are emailed, sign-up confirmation and reset links are not")
		return nil
	}
	return m
}

// startKeyNotices emails each developer once about a key that expires
// within a week (package keynotices), until bg ends. Every instance looks:
// a notice is claimed in Postgres, so it is sent once.
func startKeyNotices(bg context.Context, wg *sync.WaitGroup, d serverDeps, m *mail.Sender) {
	n := keynotices.New(d.pool, m, keynotices.Options{PublicURL: d.cfg.PublicURL, Logger: d.logger})
	wg.Add(1)
	go func() { defer wg.Done(); _ = n.Run(bg) }()
}

// newMailer is the portal's one SMTP sender (nil without PORTAL_SMTP_URL),
// shared by alerts, sign-up, password reset and key expiry emails. The
// server is the operator's own choice, often a relay on loopback or the
// private network, so it is dialed with egress's Internal policy (cloud
// metadata and link-local addresses stay refused) and the operator's
// allowlist.
func newMailer(cfg Config) (*mail.Sender, error) {
	if cfg.SMTPURL == "" {
		return nil, nil
	}
	dialer := egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal, Allow: cfg.OutboundAllow}})
	m, err := mail.New(cfg.SMTPURL, cfg.SMTPFrom, mail.Options{Dialer: dialer})
	if err != nil {
		return nil, fmt.Errorf("PORTAL_SMTP_URL: %w", err)
	}
	return m, nil
}

// alertsDeps is what the alerts pages need from startAlerts.
type alertsDeps struct {
	service *alerts.Service
	worker  *alerts.Worker
	email   bool
}

// startAlerts runs the threshold-alert evaluator and the delivery worker
// until bg ends (wg counts them). The evaluator peeks through store, the
// dashboards' store, so alerts never queue behind the request path. Every
// instance runs both: the crossings are claimed in Postgres, so each fires
// once, and the workers share the queue.
func startAlerts(bg context.Context, wg *sync.WaitGroup, d serverDeps, store enforce.Store, mailer *mail.Sender) (alertsDeps, error) {
	// Webhooks are chosen by developers: they reach public addresses only,
	// and the private receivers the operator allows.
	outbound := egress.Rules{Policy: egress.Public, Allow: d.cfg.OutboundAllow}
	svc, err := alerts.NewService(d.pool, d.cfg.SessionSecret, outbound)
	if err != nil {
		return alertsDeps{}, fmt.Errorf("alerts: %w", err)
	}
	worker, err := alerts.NewWorker(d.pool, d.cfg.SessionSecret, alerts.WorkerOptions{
		Dialer: egress.NewDialer(egress.Options{Rules: outbound}), Mailer: mailer, Logger: d.logger,
	})
	if err != nil {
		return alertsDeps{}, fmt.Errorf("alerts: %w", err)
	}
	ev := alerts.NewEvaluator(d.pool, alerts.EvaluatorOptions{
		Store: store, Interval: d.cfg.AlertInterval,
		Email: mailer != nil, Logger: d.logger, Wake: worker.Wake,
	})
	wg.Add(2)
	go func() { defer wg.Done(); _ = ev.Run(bg) }()
	go func() { defer wg.Done(); _ = worker.Run(bg) }()
	return alertsDeps{service: svc, worker: worker, email: mailer != nil}, nil
}
