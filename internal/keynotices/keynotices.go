// Package keynotices emails a developer once when one of their API keys
// will expire within a week, so that they replace it before their calls
// start failing. A notice is recorded in Postgres in the transaction that
// sends it: instances that look at once send it once, and a send that
// fails is tried again at the next look.
package keynotices

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/mail"
)

// Defaults for Options.
const (
	// DefaultWithin is how long before its expiry a key is noticed.
	DefaultWithin = 7 * 24 * time.Hour
	// DefaultInterval is how often keys are looked at: a notice is at most
	// this late against a week's warning.
	DefaultInterval = time.Hour
	// batch bounds the keys one look handles; the rest wait for the next.
	batch = 100
)

// Sender sends one email; *mail.Sender is one.
type Sender interface {
	Send(ctx context.Context, m mail.Message) error
}

// Options shapes New. Zero fields take the defaults.
type Options struct {
	Within, Interval time.Duration
	// PublicURL, when set, puts a link to the keys page in the email.
	PublicURL string
	Logger    *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Notifier sends the notices.
type Notifier struct {
	pool   *pgxpool.Pool
	sender Sender
	opts   Options
}

// New returns a Notifier sending through sender.
func New(pool *pgxpool.Pool, sender Sender, o Options) *Notifier {
	if o.Within <= 0 {
		o.Within = DefaultWithin
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Notifier{pool: pool, sender: sender, opts: o}
}

const (
	// selectDue lists live keys of enabled owners expiring within the
	// window and not yet told of that expiry, soonest first.
	selectDue = `
SELECT k.id, k.name, k.expires_at, u.email,
       COALESCE((SELECT s.prefix FROM api_key_secrets s WHERE s.key_id = k.id ORDER BY s.id DESC LIMIT 1), '')
FROM api_keys k JOIN users u ON u.id = k.user_id
WHERE k.revoked_at IS NULL AND u.disabled_at IS NULL
  AND k.expires_at > $1 AND k.expires_at <= $2
  AND NOT EXISTS (SELECT 1 FROM key_expiry_notices n WHERE n.key_id = k.id AND n.expires_at = k.expires_at)
ORDER BY k.expires_at, k.id
LIMIT $3`
	// claimNotice waits for another instance's transaction claiming the
	// same notice, and then claims nothing.
	claimNotice = `
INSERT INTO key_expiry_notices (key_id, expires_at) VALUES ($1, $2) ON CONFLICT DO NOTHING`
)

type due struct {
	id                  int64
	name, email, prefix string
	expires             time.Time
}

// RunOnce sends the notices due now and returns how many it sent. A failed
// send is logged and left for the next look.
func (n *Notifier) RunOnce(ctx context.Context) (int, error) {
	now := n.opts.Now()
	rows, err := n.pool.Query(ctx, selectDue, now, now.Add(n.opts.Within), batch)
	if err != nil {
		return 0, fmt.Errorf("keys expiring soon: %w", err)
	}
	var list []due
	var d due
	if _, err := pgx.ForEachRow(rows, []any{&d.id, &d.name, &d.expires, &d.email, &d.prefix}, func() error {
		list = append(list, d)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("keys expiring soon: %w", err)
	}
	sent := 0
	for _, d := range list {
		err := pgx.BeginFunc(ctx, n.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, claimNotice, d.id, d.expires)
			if err != nil {
				return fmt.Errorf("claim notice of key %d: %w", d.id, err)
			}
			if tag.RowsAffected() == 0 {
				return errAlreadySent
			}
			return n.sender.Send(ctx, n.message(d))
		})
		switch {
		case err == nil:
			sent++
			n.opts.Logger.Info("key expiry notice sent", "key_id", d.id)
		case errors.Is(err, errAlreadySent):
		case ctx.Err() != nil:
			return sent, ctx.Err()
		default:
			n.opts.Logger.Warn("key expiry notice not sent; trying again at the next look", "key_id", d.id, "err", err)
		}
	}
	return sent, nil
}

var errAlreadySent = errors.New("notice already sent")

func (n *Notifier) message(d due) mail.Message {
	where := "on the portal's keys page"
	if n.opts.PublicURL != "" {
		where = "at " + strings.TrimSuffix(n.opts.PublicURL, "/") + "/app/keys"
	}
	key := fmt.Sprintf("%q", d.name)
	if d.prefix != "" {
		key += " (" + d.prefix + "...)"
	}
	return mail.Message{To: d.email, Subject: fmt.Sprintf("Your Sluice API key %q expires on %s", d.name, d.expires.UTC().Format(time.DateOnly)), Body: fmt.Sprintf(
		"Your API key %s expires at %s. After that, calls made with it are refused.\n\n"+
			"Create a new key %s and switch to it before then.\n\n"+
			"This is the only notice for this key.\n",
		key, d.expires.UTC().Format("2006-01-02 15:04 MST"), where)}
}

// Run looks every Interval until ctx ends.
func (n *Notifier) Run(ctx context.Context) error {
	t := time.NewTicker(n.opts.Interval)
	defer t.Stop()
	for {
		if _, err := n.RunOnce(ctx); err != nil && ctx.Err() == nil {
			n.opts.Logger.Warn("key expiry notices", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
