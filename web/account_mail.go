package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/mail"
)

// Mailer sends one email; *mail.Sender is one.
type Mailer interface {
	Send(ctx context.Context, m mail.Message) error
}

// selfResetTTL is how long a reset link asked for by email works: the
// mailbox is at hand, so an hour is plenty, and a link in a mailbox read
// later by someone else soon stops mattering.
const selfResetTTL = time.Hour

// maxBackgroundMails bounds the reset emails being sent at once; the
// forms' rate limits keep far fewer in flight.
const maxBackgroundMails = 16

// accountMail says whether the portal sends the account emails.
func (s *Server) accountMail() bool { return s.deps.Mailer != nil && s.deps.PublicURL != "" }

// link is an absolute URL for an email: the configured public base URL
// and path, never the request's Host.
func (s *Server) link(path string) string {
	return strings.TrimSuffix(s.deps.PublicURL, "/") + path
}

// inBackground runs work (making a link and sending it) after the
// response, so that the time to answer does not tell whether an email was
// sent. Failures are logged without the message, which may hold a link.
func (s *Server) inBackground(what string, work func(ctx context.Context) error) {
	select {
	case s.mailSlots <- struct{}{}:
	default:
		s.log.Warn("email not sent: too many being sent", "what", what)
		return
	}
	go func() {
		defer func() { <-s.mailSlots }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := work(ctx); err != nil {
			s.log.Warn("email not sent", "what", what, "err", err)
		}
	}()
}

// spend spends one request of limit from subject's budget with Sluice's own
// engine and says how long to wait when it is spent. When the shared store
// is down the attempt is counted in this instance's memory.
func (s *Server) spend(r *http.Request, subject, route string, limit enforce.Limit) (time.Duration, error) {
	req := enforce.Request{Subject: subject, Route: route, Limits: []enforce.Limit{limit}}
	d, err := s.deps.Limiter.Allow(r.Context(), req)
	if err != nil {
		if r.Context().Err() != nil {
			return 0, err
		}
		s.log.Warn("form limit: shared store failed, counting locally", "route", route, "err", err)
		if d, err = s.localLimiter.Allow(r.Context(), req); err != nil {
			return 0, fmt.Errorf("form limit: %w", err)
		}
	}
	if !d.Allowed {
		return d.Binding().RetryAfter, nil
	}
	return 0, nil
}
