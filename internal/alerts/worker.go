package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/mail"
)

// Defaults of WorkerOptions.
const (
	DefaultRetryBase   = 10 * time.Second
	DefaultMaxAttempts = 8
	// DefaultTimeout bounds one webhook call or one email.
	DefaultTimeout = 10 * time.Second
	maxRetryDelay  = time.Hour
	// DefaultPerDestination bounds the attempts in flight to one webhook
	// (or one email address) from one worker.
	DefaultPerDestination = 2
	// DefaultSlowTimeout bounds an attempt to a destination whose latest
	// attempt timed out, until one succeeds.
	DefaultSlowTimeout = 2 * time.Second
	// maxInFlight bounds the attempts in flight from one worker.
	maxInFlight = 64
	// maxAnswerBytes is how much of a receiver's answer is read (and
	// dropped) so the connection can be reused.
	maxAnswerBytes = 64 << 10
	pollInterval   = time.Second
	batchSize      = 20
)

// WorkerOptions configures NewWorker.
type WorkerOptions struct {
	// Dialer connects to the webhooks; nil means a dialer that reaches
	// public addresses only (egress.Public, no exceptions). Its client
	// follows no redirect (a 3xx is a failed attempt) and reads at most
	// maxAnswerBytes of an answer.
	Dialer *egress.Dialer
	// Mailer sends the email deliveries; nil leaves them failing with
	// "no SMTP configured".
	Mailer *Mailer
	// RetryBase is the delay after a first failed attempt, doubled after
	// each further one up to an hour; 0 means DefaultRetryBase.
	RetryBase time.Duration
	// MaxAttempts is how many attempts a delivery gets before it is
	// marked failed; 0 means DefaultMaxAttempts.
	MaxAttempts int
	// Timeout bounds one attempt; 0 means DefaultTimeout.
	Timeout time.Duration
	// SlowTimeout bounds an attempt to a destination whose latest attempt
	// timed out (DefaultSlowTimeout), so a receiver that hangs costs its
	// own deliveries a short wait, not the full Timeout each.
	SlowTimeout time.Duration
	// PerDestination bounds the attempts in flight to one destination
	// (DefaultPerDestination); deliveries to other destinations go out
	// beside them.
	PerDestination int
	Logger         *slog.Logger
	// Now is the clock of the signature timestamps; nil means time.Now.
	// (Scheduling uses the database's clock, shared by every instance.)
	Now func() time.Time
}

// Worker sends queued deliveries. Any number of workers (instances) may run
// on one database: each claims due rows with FOR UPDATE SKIP LOCKED and a
// lease, so a row is sent by one worker at a time and a crashed worker's
// rows are taken up again when the lease runs out.
type Worker struct {
	pool   *pgxpool.Pool
	sealer sealer
	opts   WorkerOptions
	client *http.Client
	log    *slog.Logger
	now    func() time.Time
	wake   chan struct{}

	mu sync.Mutex
	// inFlight counts the attempts running per destination (dest), total
	// all of them; slow holds the destinations whose latest attempt timed
	// out.
	inFlight map[string]int
	total    int
	slow     map[string]bool
	running  sync.WaitGroup
}

// NewWorker returns a Worker over pool; sessionSecret opens the webhook
// secrets (as in NewService).
func NewWorker(pool *pgxpool.Pool, sessionSecret []byte, opts WorkerOptions) (*Worker, error) {
	s, err := newSealer(sessionSecret)
	if err != nil {
		return nil, err
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = DefaultRetryBase
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.SlowTimeout <= 0 {
		opts.SlowTimeout = min(DefaultSlowTimeout, opts.Timeout)
	}
	if opts.PerDestination <= 0 {
		opts.PerDestination = DefaultPerDestination
	}
	if opts.Dialer == nil {
		opts.Dialer = egress.NewDialer(egress.Options{})
	}
	client := opts.Dialer.Client(egress.ClientOptions{Timeout: opts.Timeout, MaxResponseBytes: maxAnswerBytes})
	w := &Worker{pool: pool, sealer: s, opts: opts, client: client, log: opts.Logger, now: opts.Now, wake: make(chan struct{}, 1),
		inFlight: map[string]int{}, slow: map[string]bool{}}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.now == nil {
		w.now = time.Now
	}
	return w, nil
}

// Wake makes a running worker look for due deliveries now.
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run sends due deliveries until ctx ends, polling every second (and when
// an attempt ends). Attempts run beside each other, so a receiver that
// hangs delays only its own deliveries; when ctx ends, Run waits for the
// attempts in flight (each bounded by Timeout).
func (w *Worker) Run(ctx context.Context) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	defer w.running.Wait()
	for {
		for {
			n, _, err := w.start(ctx, 0)
			if err != nil && ctx.Err() == nil {
				w.log.Warn("alert deliveries", "err", err)
			}
			if n == 0 || err != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-w.wake:
		}
	}
}

// claimed is a delivery this worker holds, with its destination.
type claimed struct {
	ID        int64   `db:"id"`
	UserID    int64   `db:"user_id"`
	WebhookID *int64  `db:"webhook_id"`
	EmailTo   *string `db:"email_to"`
	EventType string  `db:"event_type"`
	Payload   []byte  `db:"payload"`
	Attempts  int     `db:"attempts"`
	URL       *string `db:"url"`
	Sealed    []byte  `db:"secret_sealed"`
}

// The lease outlasts an attempt's timeout; $2 = 0 claims any due row; $4
// lists the destinations (see dest) that have no room for more attempts.
const claimDue = `
WITH due AS (
    SELECT id FROM alert_deliveries
    WHERE state = 'pending' AND next_attempt_at <= now()
      AND (locked_until IS NULL OR locked_until < now())
      AND ($2::bigint = 0 OR id = $2)
      AND NOT (CASE WHEN webhook_id IS NOT NULL THEN 'w:' || webhook_id ELSE 'm:' || coalesce(email_to, '') END = ANY($4::text[]))
    ORDER BY next_attempt_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE alert_deliveries d
    SET locked_until = now() + make_interval(secs => $3), attempts = d.attempts + 1
    FROM due WHERE d.id = due.id
    RETURNING d.id, d.user_id, d.webhook_id, d.email_to, d.event_type, d.payload, d.attempts
)
SELECT c.id, c.user_id, c.webhook_id, c.email_to, c.event_type, c.payload, c.attempts,
       w.url, w.secret_sealed
FROM claimed c LEFT JOIN alert_webhooks w ON w.id = c.webhook_id
ORDER BY c.id`

// SendDue sends up to a batch of due deliveries and returns how many it
// attempted.
func (w *Worker) SendDue(ctx context.Context) (int, error) {
	return w.send(ctx, 0)
}

// SendNow attempts delivery id at once if it is due and not held by another
// worker (the portal's "send test event" does, so the log shows the answer
// on the next page). It reports whether it attempted.
func (w *Worker) SendNow(ctx context.Context, id int64) (bool, error) {
	n, err := w.send(ctx, id)
	return n > 0, err
}

// send attempts a batch of due deliveries (only that one, if not 0) and
// waits for the attempts.
func (w *Worker) send(ctx context.Context, only int64) (int, error) {
	n, b, err := w.start(ctx, only)
	b.wg.Wait()
	return n, errors.Join(append(b.errs, err)...)
}

// attempt sends one delivery; status is the receiver's answer (0 for none).
// A webhook's error is a *deliveryError: its text, shown to the developer,
// says only refused, timed out or failed, so the delivery log cannot map
// what answers where; its cause goes to the server log.
func (w *Worker) attempt(ctx context.Context, d claimed, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if d.EmailTo != nil {
		if w.opts.Mailer == nil {
			return 0, errors.New("no SMTP server configured (PORTAL_SMTP_URL)")
		}
		var ev Event
		if err := json.Unmarshal(d.Payload, &ev); err != nil {
			return 0, fmt.Errorf("bad payload: %w", err)
		}
		if err := w.opts.Mailer.Send(ctx, mail.Message{To: *d.EmailTo, Subject: emailSubject(ev), Body: emailBody(ev, d.Payload)}); err != nil {
			return smtpCode(err), err
		}
		return 250, nil
	}
	if d.URL == nil {
		return 0, errors.New("webhook deleted")
	}
	secret, err := w.sealer.open(d.UserID, d.Sealed)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, *d.URL, bytes.NewReader(d.Payload))
	if err != nil {
		return 0, &deliveryError{shown: "failed: the webhook URL is not usable", cause: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Sluice-Webhooks/1")
	req.Header.Set(EventHeader, d.EventType)
	req.Header.Set(DeliveryHeader, strconv.FormatInt(d.ID, 10))
	req.Header.Set(SignatureHeader, Sign(secret, w.now(), d.Payload))
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, sendError(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, &deliveryError{shown: "failed: the receiver did not answer 2xx",
			cause: fmt.Errorf("answered %s", resp.Status)}
	}
	return resp.StatusCode, nil
}

// deliveryError is a failed webhook attempt: shown is all the developer
// sees; cause, for the server log, says what happened.
type deliveryError struct {
	shown string
	cause error
}

func (e *deliveryError) Error() string { return e.shown }
func (e *deliveryError) Unwrap() error { return e.cause }

// sendError words a transport error for the delivery log: refused (the
// address is not one webhooks may reach), timed out, or failed (no
// connection, reset, no answer, a TLS error...), never which of the latter,
// since telling "connection refused" from "EOF" from a handshake failure is
// how a port scan reads its results.
func sendError(err error) error {
	shown := "failed: no answer from the receiver"
	switch {
	case errors.Is(err, egress.ErrRefused):
		shown = "refused: webhooks reach public addresses only (the operator can allow a private receiver)"
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		shown = "timed out"
	}
	// The URL (whose query might hold the developer's token) stays out of
	// the log too.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &deliveryError{shown: shown, cause: err}
}

// isTimeout is a dial or read that ran out of time, the client's own Timeout
// included.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// The attempts keep every answer's status; the delivery, which the
// developer's log shows, keeps $6.
const recordAttempt = `
WITH a AS (
    INSERT INTO alert_delivery_attempts (delivery_id, status_code, error) VALUES ($1, $2, $3)
)
UPDATE alert_deliveries SET
    state = $4,
    last_status = $6,
    last_error = $3,
    locked_until = NULL,
    next_attempt_at = CASE WHEN $4 = 'pending' THEN now() + make_interval(secs => $5) ELSE next_attempt_at END,
    delivered_at = CASE WHEN $4 = 'delivered' THEN now() ELSE NULL END
WHERE id = $1`

// record writes an attempt's outcome and schedules the next one with
// exponential backoff, or gives up after MaxAttempts.
func (w *Worker) record(ctx context.Context, d claimed, status int, sendErr error) error {
	state, msg := "delivered", ""
	var delay time.Duration
	if sendErr != nil {
		msg = sendErr.Error()
		state = "pending"
		delay = min(w.opts.RetryBase<<min(d.Attempts-1, 20), maxRetryDelay)
		if d.Attempts >= w.opts.MaxAttempts || msg == "webhook deleted" {
			state = "failed"
		}
		cause := sendErr
		if de, ok := sendErr.(*deliveryError); ok {
			cause = de.cause
		}
		w.log.Warn("alert delivery failed", "delivery_id", d.ID, "attempt", d.Attempts, "status", status, "err", msg, "cause", cause.Error(), "next", state)
	}
	var code *int
	if status != 0 {
		code = &status
	}
	// A webhook's refusal status is what answered at that address: the
	// developer's log shows "failed" without it (the server log has it).
	shown := code
	var de *deliveryError
	if errors.As(sendErr, &de) {
		shown = nil
	}
	// The attempt is recorded even when the request was cancelled.
	ctx = context.WithoutCancel(ctx)
	if _, err := w.pool.Exec(ctx, recordAttempt, d.ID, code, msg, state, delay.Seconds(), shown); err != nil {
		return fmt.Errorf("alerts: record attempt of delivery %d: %w", d.ID, err)
	}
	return nil
}

func emailSubject(ev Event) string {
	switch ev.Type {
	case EventPace:
		return "Sluice: at this pace " + ev.Limit.Policy + " runs out before it renews"
	case EventThreshold:
		return fmt.Sprintf("Sluice: %d%% of %s used", ev.ThresholdPercent, ev.Limit.Policy)
	default:
		return "Sluice: test alert"
	}
}

func emailBody(ev Event, payload []byte) string {
	var b strings.Builder
	b.WriteString(ev.Message)
	b.WriteString("\r\n\r\n")
	if ev.Limit != nil {
		fmt.Fprintf(&b, "Limit: %s", ev.Limit.Policy)
		if ev.Limit.Route != "" {
			fmt.Fprintf(&b, " (%s)", ev.Limit.Route)
		}
		fmt.Fprintf(&b, "\r\nUsed: %d of %d (%d%%)\r\nResets: %s\r\n\r\n", ev.Used, ev.Capacity, ev.UsedPercent, ev.ResetsAt.Format(time.RFC1123))
	}
	b.WriteString("Change which alerts you get under Alerts in the developer portal.\r\n\r\nThe event as JSON:\r\n")
	b.Write(payload)
	b.WriteString("\r\n")
	return b.String()
}
