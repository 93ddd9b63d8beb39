package alerts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/egress"
)

// Service is the developer's side of alerts over Postgres: rules, webhooks
// and the delivery log.
type Service struct {
	pool     *pgxpool.Pool
	sealer   sealer
	outbound egress.Rules
}

// NewService returns a Service over pool; sessionSecret (at least 32 bytes)
// keys the sealing of webhook secrets (see seal.go); outbound is what the
// worker's dialer reaches, so a URL it would refuse is refused when saved.
func NewService(pool *pgxpool.Pool, sessionSecret []byte, outbound egress.Rules) (*Service, error) {
	s, err := newSealer(sessionSecret)
	if err != nil {
		return nil, err
	}
	return &Service{pool: pool, sealer: s, outbound: outbound}, nil
}

const selectRules = `
SELECT id, user_id, key_id, thresholds, pace, email, updated_at
FROM alert_rules WHERE user_id = $1 ORDER BY key_id NULLS FIRST, id`

// Rules lists a developer's rules, the account's first.
func (s *Service) Rules(ctx context.Context, userID int64) ([]Rule, error) {
	rows, err := s.pool.Query(ctx, selectRules, userID)
	if err != nil {
		return nil, fmt.Errorf("alerts: list rules: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Rule])
	if err != nil {
		return nil, fmt.Errorf("alerts: list rules: %w", err)
	}
	return out, nil
}

// The key must be the developer's own: the INSERT selects nothing otherwise.
const upsertRule = `
INSERT INTO alert_rules (user_id, key_id, thresholds, pace, email)
SELECT $1, $2, $3, $4, $5
WHERE $2::bigint IS NULL OR EXISTS (SELECT 1 FROM api_keys WHERE id = $2 AND user_id = $1)
ON CONFLICT (user_id, COALESCE(key_id, 0)) DO UPDATE
SET thresholds = EXCLUDED.thresholds, pace = EXCLUDED.pace, email = EXCLUDED.email, updated_at = now()
RETURNING id, user_id, key_id, thresholds, pace, email, updated_at`

// SaveRule creates or replaces the developer's rule for their account
// (keyID nil) or for one of their keys. A rule needs a threshold or pace.
func (s *Service) SaveRule(ctx context.Context, userID int64, keyID *int64, thresholds []int32, pace, email bool) (Rule, error) {
	if len(thresholds) == 0 && !pace {
		return Rule{}, &FieldError{"thresholds", "name at least one percent, or choose the pace warning"}
	}
	if thresholds == nil {
		thresholds = []int32{}
	}
	rows, err := s.pool.Query(ctx, upsertRule, userID, keyID, thresholds, pace, email)
	if err != nil {
		return Rule{}, fmt.Errorf("alerts: save rule: %w", err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Rule])
	if errors.Is(err, pgx.ErrNoRows) {
		return Rule{}, &FieldError{"key", "is not one of your keys"}
	}
	if err != nil {
		return Rule{}, fmt.Errorf("alerts: save rule: %w", err)
	}
	return r, nil
}

// EnsureDefaultRule gives the developer the default account rule (80 %,
// 100 %, pace, email) unless they have one; registering a first webhook
// calls it, so alerts start without a second step.
func (s *Service) EnsureDefaultRule(ctx context.Context, userID int64) error {
	_, err := s.pool.Exec(ctx, `
INSERT INTO alert_rules (user_id, key_id, thresholds, pace, email)
VALUES ($1, NULL, $2, true, true)
ON CONFLICT (user_id, COALESCE(key_id, 0)) DO NOTHING`, userID, []int32{80, 100})
	if err != nil {
		return fmt.Errorf("alerts: default rule: %w", err)
	}
	return nil
}

// DeleteRule removes one of the developer's rules.
func (s *Service) DeleteRule(ctx context.Context, userID, ruleID int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM alert_rules WHERE id = $1 AND user_id = $2`, ruleID, userID)
	if err != nil {
		return fmt.Errorf("alerts: delete rule: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// CreateWebhook registers url for the developer and returns the webhook
// and its signing secret, which is never returned again.
func (s *Service) CreateWebhook(ctx context.Context, userID int64, rawURL string) (Webhook, string, error) {
	u, err := CheckURL(rawURL, s.outbound)
	if err != nil {
		return Webhook{}, "", err
	}
	secret := newSecret()
	sealed, err := s.sealer.seal(userID, []byte(secret))
	if err != nil {
		return Webhook{}, "", fmt.Errorf("alerts: seal secret: %w", err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Webhook{}, "", fmt.Errorf("alerts: create webhook: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The user row lock serializes one developer's creations, so the cap
	// holds under concurrent posts.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM users WHERE id = $1 FOR UPDATE`, userID); err != nil {
		return Webhook{}, "", fmt.Errorf("alerts: create webhook: %w", err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM alert_webhooks WHERE user_id = $1`, userID).Scan(&n); err != nil {
		return Webhook{}, "", fmt.Errorf("alerts: create webhook: %w", err)
	}
	if n >= MaxWebhooks {
		return Webhook{}, "", ErrTooManyWebhooks
	}
	rows, err := tx.Query(ctx, `
INSERT INTO alert_webhooks (user_id, url, secret_sealed, secret_prefix) VALUES ($1, $2, $3, $4)
RETURNING id, user_id, url, secret_prefix, created_at`, userID, u, sealed, secret[:12])
	if err != nil {
		return Webhook{}, "", fmt.Errorf("alerts: create webhook: %w", err)
	}
	w, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Webhook])
	if err != nil {
		return Webhook{}, "", fmt.Errorf("alerts: create webhook: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Webhook{}, "", fmt.Errorf("alerts: create webhook: %w", err)
	}
	return w, secret, nil
}

// Webhooks lists the developer's webhooks, oldest first.
func (s *Service) Webhooks(ctx context.Context, userID int64) ([]Webhook, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id, user_id, url, secret_prefix, created_at FROM alert_webhooks WHERE user_id = $1 ORDER BY id`, userID)
	if err != nil {
		return nil, fmt.Errorf("alerts: list webhooks: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Webhook])
	if err != nil {
		return nil, fmt.Errorf("alerts: list webhooks: %w", err)
	}
	return out, nil
}

// Webhook returns one of the developer's webhooks, or ErrNotFound.
func (s *Service) Webhook(ctx context.Context, userID, id int64) (Webhook, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id, user_id, url, secret_prefix, created_at FROM alert_webhooks WHERE id = $1 AND user_id = $2`, id, userID)
	if err != nil {
		return Webhook{}, fmt.Errorf("alerts: webhook: %w", err)
	}
	w, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Webhook])
	if errors.Is(err, pgx.ErrNoRows) {
		return Webhook{}, ErrNotFound
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("alerts: webhook: %w", err)
	}
	return w, nil
}

// DeleteWebhook removes one of the developer's webhooks and its queued
// deliveries.
func (s *Service) DeleteWebhook(ctx context.Context, userID, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM alert_webhooks WHERE id = $1 AND user_id = $2`, id, userID)
	if err != nil {
		return fmt.Errorf("alerts: delete webhook: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// EnqueueTest queues a test event to one of the developer's webhooks and
// returns the delivery's id.
func (s *Service) EnqueueTest(ctx context.Context, userID, webhookID int64, now time.Time) (int64, error) {
	if _, err := s.Webhook(ctx, userID, webhookID); err != nil {
		return 0, err
	}
	ev := Event{ID: newEventID(), Type: EventTest, CreatedAt: now.UTC(), DeveloperID: userID,
		Message: "This is a test event from Sluice: your webhook is reachable and can check the signature."}
	body, err := json.Marshal(ev)
	if err != nil {
		return 0, err
	}
	var id int64
	err = s.pool.QueryRow(ctx, `
INSERT INTO alert_deliveries (user_id, webhook_id, event_type, payload) VALUES ($1, $2, $3, $4) RETURNING id`,
		userID, webhookID, EventTest, body).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("alerts: queue test event: %w", err)
	}
	return id, nil
}

const selectDeliveries = `
SELECT d.id, d.user_id, d.webhook_id, d.email_to, COALESCE(w.url, d.email_to, '') AS destination,
       d.event_type, d.state, d.attempts, d.next_attempt_at, d.last_status, d.last_error,
       d.created_at, d.delivered_at
FROM alert_deliveries d LEFT JOIN alert_webhooks w ON w.id = d.webhook_id
WHERE d.user_id = $1 ORDER BY d.id DESC LIMIT $2`

// Deliveries is the developer's delivery log, newest first, at most limit.
func (s *Service) Deliveries(ctx context.Context, userID int64, limit int) ([]Delivery, error) {
	rows, err := s.pool.Query(ctx, selectDeliveries, userID, limit)
	if err != nil {
		return nil, fmt.Errorf("alerts: delivery log: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Delivery])
	if err != nil {
		return nil, fmt.Errorf("alerts: delivery log: %w", err)
	}
	return out, nil
}

func newEventID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "evt_" + hex.EncodeToString(b)
}
