package services

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/pgtext"
	"github.com/sluicehq/sluice/internal/plans"
)

// TokenPrefix starts every service token, so a leaked one is recognisable.
const TokenPrefix = "sluice_svc_"

// ErrBadToken means a service token is malformed, unknown or revoked.
var ErrBadToken = errors.New("invalid service token")

// Token is a service token as stored: its secret is shown once, at
// creation, and only its hash is kept.
type Token struct {
	ID        int64      `json:"id"`
	Service   string     `json:"service"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"`
	RevokedAt *time.Time `json:"revoked_at"`
	CreatedAt time.Time  `json:"created_at"`
}

const (
	insertToken = `
INSERT INTO service_tokens (service_id, name, hash, prefix)
SELECT id, $2, $3, $4 FROM services WHERE slug = $1
RETURNING id, created_at`
	revokeToken = `
UPDATE service_tokens t SET revoked_at = now()
FROM services s
WHERE t.id = $2 AND t.service_id = s.id AND s.slug = $1 AND t.revoked_at IS NULL`
	selectTokenService = `
SELECT s.slug FROM service_tokens t JOIN services s ON s.id = t.service_id
WHERE t.hash = $1 AND t.revoked_at IS NULL`
)

// CreateToken issues a token for the service named slug and returns it with
// its secret, which is never stored. Errors: *plans.ValidationError (name),
// ErrNotFound.
func (r *Repo) CreateToken(ctx context.Context, actor, slug, name string) (Token, string, error) {
	name = strings.TrimSpace(name)
	if msg := pgtext.NameProblem(name); msg != "" {
		return Token{}, "", &plans.ValidationError{Fields: []plans.FieldError{{Field: "name", Message: msg}}}
	}
	if n := utf8.RuneCountInString(name); n < 1 || n > MaxNameLen {
		return Token{}, "", &plans.ValidationError{Fields: []plans.FieldError{{Field: "name",
			Message: fmt.Sprintf("must be 1 to %d characters", MaxNameLen)}}}
	}
	secret := TokenPrefix + rand.Text()
	hash := sha256.Sum256([]byte(secret))
	t := Token{Service: slug, Name: name, Prefix: secret[:len(TokenPrefix)+4]}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, insertToken, slug, name, hash[:], t.Prefix).Scan(&t.ID, &t.CreatedAt); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("service %q: %w", slug, ErrNotFound)
			}
			return err
		}
		return audit.Record(ctx, tx, actor, "service.token.create", audit.ObjectService, slug, nil, t)
	})
	if err != nil {
		return Token{}, "", fmt.Errorf("create token: %w", err)
	}
	return t, secret, nil
}

// RevokeToken revokes token id of the service named slug. Errors:
// ErrNotFound (no such live token).
func (r *Repo) RevokeToken(ctx context.Context, actor, slug string, id int64) error {
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, revokeToken, slug, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("token %d of %q: %w", id, slug, ErrNotFound)
		}
		return audit.Record(ctx, tx, actor, "service.token.revoke", audit.ObjectService, slug,
			map[string]int64{"token_id": id}, nil)
	})
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	return nil
}

// Authenticate returns the slug of the service a token belongs to, or
// ErrBadToken.
func (r *Repo) Authenticate(ctx context.Context, secret string) (string, error) {
	if !strings.HasPrefix(secret, TokenPrefix) || len(secret) > 128 {
		return "", ErrBadToken
	}
	hash := sha256.Sum256([]byte(secret))
	var slug string
	if err := r.pool.QueryRow(ctx, selectTokenService, hash[:]).Scan(&slug); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return "", ErrBadToken
		}
		return "", fmt.Errorf("authenticate service token: %w", err)
	}
	return slug, nil
}
