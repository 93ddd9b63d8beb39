// Package resets keeps one-time password reset links: an operator makes
// one for any user, the user opens it once before it expires and chooses a
// password, and every session of that user ends. A link stops working when
// it is used, when it expires, when a newer link is made for the same user
// and when the user's password changes in any way.
package resets

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/pgsession"
	"github.com/sluicehq/sluice/internal/users"
)

// DefaultTTL is how long a link works: long enough to reach someone by
// another channel, short enough that a forgotten link soon stops mattering.
const DefaultTTL = 24 * time.Hour

// ErrInvalid means the token is unknown, used or expired; the page says
// which in no case, so a guesser learns nothing.
var ErrInvalid = errors.New("reset link is invalid, used or expired")

// tokenBytes of randomness: 256 bits, base64url in the link.
const tokenBytes = 32

// Store makes and redeems reset links in Postgres.
type Store struct {
	pool *pgxpool.Pool
	ttl  time.Duration
	now  func() time.Time
}

// NewStore returns a store over pool; ttl 0 means DefaultTTL, now nil
// means time.Now.
func NewStore(pool *pgxpool.Pool, ttl time.Duration, now func() time.Time) *Store {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Store{pool: pool, ttl: ttl, now: now}
}

const (
	// endOpenLinks runs before a new link is made: only the newest link of
	// a user opens. (A password change ends them too, by the trigger of
	// migration 000026, however the password is changed.)
	endOpenLinks = `DELETE FROM password_resets WHERE user_id = $1 AND used_at IS NULL`
	insertReset  = `
INSERT INTO password_resets (token_hash, user_id, created_by, expires_at) VALUES ($1, $2, $3, $4)`
	// claimReset marks the link used in the same statement that checks it,
	// so two concurrent uses cannot both succeed.
	claimReset = `
UPDATE password_resets SET used_at = $2
WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2
RETURNING user_id`
	selectValid = `
SELECT EXISTS (SELECT 1 FROM password_resets WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2)`
)

func hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// Create makes a link token for userID and returns it with its expiry; the
// user's older links not yet used stop working. The token is returned only
// here. Within db (a transaction, so a new account
// and its link commit together; or the pool).
func (s *Store) Create(ctx context.Context, db audit.DBTX, actor string, userID int64) (string, time.Time, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", time.Time{}, fmt.Errorf("reset token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	expires := s.now().Add(s.ttl)
	if _, err := db.Exec(ctx, endOpenLinks, userID); err != nil {
		return "", time.Time{}, fmt.Errorf("end older reset links of user %d: %w", userID, err)
	}
	if _, err := db.Exec(ctx, insertReset, hash(token), userID, actor, expires); err != nil {
		return "", time.Time{}, fmt.Errorf("create reset link for user %d: %w", userID, err)
	}
	if err := audit.Record(ctx, db, actor, "user.reset_link", audit.ObjectUser, strconv.FormatInt(userID, 10),
		nil, map[string]any{"expires_at": expires}); err != nil {
		return "", time.Time{}, err
	}
	return token, expires, nil
}

// Redeem uses token to set the user's password to next, ends every session
// of the user, and returns the user. An unknown, used or expired token is
// ErrInvalid; a password the rules refuse is a users.FieldErrors under
// "password", and leaves the link usable.
func (s *Store) Redeem(ctx context.Context, token, next string) (users.User, error) {
	var u users.User
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var userID int64
		err := tx.QueryRow(ctx, claimReset, hash(token), s.now()).Scan(&userID)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrInvalid
		}
		if err != nil {
			return fmt.Errorf("claim reset link: %w", err)
		}
		if u, err = users.NewRepo(tx).SetPassword(ctx, userID, next); err != nil {
			return err
		}
		// Ending every session (keep "") hashes no identifier: no secret needed.
		n, err := pgsession.New(tx, nil, pgsession.Options{}).EndUser(ctx, userID, "")
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, fmt.Sprintf("user:%d", userID), "user.reset_password", audit.ObjectUser,
			strconv.FormatInt(userID, 10), nil, map[string]any{"sessions_ended": n, "via": "link"})
	})
	if err != nil {
		return users.User{}, err
	}
	return u, nil
}

// Valid reports whether token is a usable link now, for showing the form.
func (s *Store) Valid(ctx context.Context, token string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, selectValid, hash(token), s.now()).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check reset link: %w", err)
	}
	return ok, nil
}
