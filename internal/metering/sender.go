package metering

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/alerts"
)

// EventType is the Sluice-Event header of a metering delivery.
const EventType = "meter.usage"

// Defaults of SenderOptions.
const (
	DefaultEventName = "sluice_api_requests"
	DefaultBatch     = 100
	DefaultRetryBase = 10 * time.Second
	DefaultTimeout   = 10 * time.Second
	maxRetryDelay    = time.Hour
	senderPoll       = 5 * time.Second
)

// SenderOptions configure a Sender. URL and Secret are required.
type SenderOptions struct {
	// URL receives the records; Secret signs them (Sluice-Signature, as
	// alerts.Sign: HMAC-SHA256 of "<t>.<body>").
	URL    string
	Secret []byte
	// EventName is every event's event_name (DefaultEventName).
	EventName string
	// Client sends the requests. Nil means a client with Timeout that
	// follows no redirect; the portal passes one whose dialer refuses
	// private addresses unless the operator allows them.
	Client *http.Client
	// Batch is how many records one request carries at most (DefaultBatch,
	// the most a Stripe meter event stream takes).
	Batch int
	// RetryBase is the wait after a first failure, doubled after each
	// further one up to an hour; a record is retried until it is taken.
	RetryBase time.Duration
	Timeout   time.Duration
	Logger    *slog.Logger
	// Registerer, when set, receives sluice_meter_deliveries_total{result}
	// and sluice_meter_records_pending.
	Registerer prometheus.Registerer
	// Now is the clock of the signature (time.Now).
	Now func() time.Time
}

// Sender delivers usage records to a webhook. Any number of instances may
// run one: each claims due records with FOR UPDATE SKIP LOCKED and a lease.
type Sender struct {
	pool    *pgxpool.Pool
	opts    SenderOptions
	log     *slog.Logger
	now     func() time.Time
	results *prometheus.CounterVec
	pending prometheus.Gauge
}

// NewSender returns a sender of pool's records.
func NewSender(pool *pgxpool.Pool, opts SenderOptions) (*Sender, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, errors.New("metering: the webhook URL must be an http or https URL")
	}
	if len(opts.Secret) < 16 {
		return nil, errors.New("metering: the webhook secret must be at least 16 bytes")
	}
	opts.EventName = cmp.Or(opts.EventName, DefaultEventName)
	opts.Batch = cmp.Or(opts.Batch, DefaultBatch)
	opts.RetryBase = cmp.Or(opts.RetryBase, DefaultRetryBase)
	opts.Timeout = cmp.Or(opts.Timeout, DefaultTimeout)
	if opts.Client == nil {
		opts.Client = &http.Client{
			Timeout:       opts.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	s := &Sender{pool: pool, opts: opts, log: opts.Logger, now: opts.Now,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_meter_deliveries_total",
			Help: "Deliveries of usage records to the metering webhook, by result (delivered, failed).",
		}, []string{"result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_meter_records_pending",
			Help: "Usage records the metering webhook has not taken yet.",
		}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.results, s.pending)
	}
	return s, nil
}

// Event is one record in the shape of a Stripe Billing meter event (as a
// v2 meter event stream takes them): the receiver maps developer_id to its
// customer and sums value per event_name and customer; identifier makes a
// record counted once however often it is delivered.
type Event struct {
	EventName  string `json:"event_name"`
	Identifier string `json:"identifier"`
	// Timestamp is the period's start.
	Timestamp time.Time    `json:"timestamp"`
	Payload   EventPayload `json:"payload"`
}

// EventPayload is an event's payload; Stripe takes payload values as
// strings.
type EventPayload struct {
	// Value is the cost units the record adds: what its admitted requests
	// cost the tier, settled after their responses (for tier "", one a
	// request). Requests is how many admitted requests that was.
	Value          string `json:"value"`
	Requests       string `json:"requests"`
	DeveloperID    string `json:"developer_id"`
	DeveloperEmail string `json:"developer_email"`
	Plan           string `json:"plan"`
	// Tier is the tier's name, "" for every request on the plan.
	Tier        string `json:"tier"`
	Rejected    string `json:"rejected"`
	PeriodStart string `json:"period_start"`
	PeriodEnd   string `json:"period_end"`
	Revision    string `json:"revision"`
}

// Delivery is the body of one request to the webhook.
type Delivery struct {
	Events []Event `json:"events"`
}

const claimRecords = `
WITH due AS (
    SELECT id FROM meter_records
    WHERE delivered_at IS NULL AND next_attempt_at <= now() AND (locked_until IS NULL OR locked_until < now())
    ORDER BY next_attempt_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE meter_records r SET locked_until = now() + make_interval(secs => $2), attempts = r.attempts + 1
    FROM due WHERE r.id = due.id
    RETURNING r.id, r.user_id, r.plan, r.tier, r.period_start, r.period_end, r.revision, r.requests, r.rejected, r.units, r.attempts
)
SELECT c.id, c.user_id, COALESCE(u.email, ''), c.plan, c.tier, c.period_start, c.period_end, c.revision, c.requests, c.rejected, c.units, c.attempts
FROM claimed c LEFT JOIN users u ON u.id = c.user_id
ORDER BY c.period_start, c.id`

// SendDue sends one batch of due records and returns how many it sent; a
// batch the receiver did not take is scheduled again and its failure
// returned.
func (s *Sender) SendDue(ctx context.Context) (int, error) {
	lease := (s.opts.Timeout + 30*time.Second).Seconds()
	rows, err := s.pool.Query(ctx, claimRecords, s.opts.Batch, lease)
	if err != nil {
		return 0, fmt.Errorf("metering: claim records: %w", err)
	}
	var (
		d        Delivery
		ids      []string
		attempts int
	)
	var r struct {
		id, email, plan, tier string
		user, req, rej, units int64
		start, end            time.Time
		rev, attempts         int
	}
	_, err = pgx.ForEachRow(rows, []any{&r.id, &r.user, &r.email, &r.plan, &r.tier, &r.start, &r.end, &r.rev, &r.req, &r.rej, &r.units, &r.attempts}, func() error {
		ids = append(ids, r.id)
		attempts = max(attempts, r.attempts)
		d.Events = append(d.Events, Event{EventName: s.opts.EventName, Identifier: r.id, Timestamp: r.start.UTC(), Payload: EventPayload{
			Value: strconv.FormatInt(r.units, 10), Requests: strconv.FormatInt(r.req, 10), DeveloperID: strconv.FormatInt(r.user, 10), DeveloperEmail: r.email,
			Plan: r.plan, Tier: r.tier, Rejected: strconv.FormatInt(r.rej, 10),
			PeriodStart: r.start.UTC().Format(time.RFC3339), PeriodEnd: r.end.UTC().Format(time.RFC3339), Revision: strconv.Itoa(r.rev),
		}})
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("metering: claim records: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	sendErr := s.post(ctx, d, ids)
	// The outcome is recorded even when ctx ended mid-request.
	rec := context.WithoutCancel(ctx)
	if sendErr == nil {
		s.results.WithLabelValues("delivered").Inc()
		if _, err := s.pool.Exec(rec, `UPDATE meter_records SET delivered_at = now(), locked_until = NULL, last_error = '' WHERE id = ANY($1)`, ids); err != nil {
			return len(ids), fmt.Errorf("metering: mark delivered: %w", err)
		}
		return len(ids), nil
	}
	s.results.WithLabelValues("failed").Inc()
	delay := min(s.opts.RetryBase<<min(attempts-1, 20), maxRetryDelay)
	if _, err := s.pool.Exec(rec, `
UPDATE meter_records SET locked_until = NULL, last_error = $2, next_attempt_at = now() + make_interval(secs => $3)
WHERE id = ANY($1)`, ids, sendErr.Error(), delay.Seconds()); err != nil {
		return len(ids), fmt.Errorf("metering: record failure: %w", err)
	}
	return len(ids), fmt.Errorf("metering: %d records not taken (attempt %d, next in %v): %w", len(ids), attempts, delay, sendErr)
}

// post sends one delivery; its error text is short and free of the URL.
func (s *Sender) post(ctx context.Context, d Delivery, ids []string) error {
	body, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("bad webhook URL")
	}
	h := sha256.Sum256([]byte(strings.Join(ids, ",")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Sluice-Webhooks/1")
	req.Header.Set(alerts.EventHeader, EventType)
	// The same records make the same delivery id, so a receiver can tell
	// a retry from new usage before it reads the body.
	req.Header.Set(alerts.DeliveryHeader, hex.EncodeToString(h[:12]))
	req.Header.Set(alerts.SignatureHeader, alerts.Sign(s.opts.Secret, s.now(), body))
	res, err := s.opts.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return errors.New("timed out")
		}
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return errors.New(msg)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	_ = res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Errorf("answered %s", res.Status)
	}
	return nil
}

// Run sends due records until ctx ends, looking every few seconds, and
// keeps sluice_meter_records_pending. It returns nil.
func (s *Sender) Run(ctx context.Context) error {
	t := time.NewTicker(senderPoll)
	defer t.Stop()
	for {
		for {
			n, err := s.SendDue(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("metering: sending records", "err", err)
			}
			if n < s.opts.Batch || err != nil {
				break
			}
		}
		var pending int64
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM meter_records WHERE delivered_at IS NULL`).Scan(&pending); err == nil {
			s.pending.Set(float64(pending))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
