// Package optokens holds operator API tokens: the bearer credentials that
// authenticate calls to the admin API (/admin/api/v1). A token is shown once,
// at creation; only its SHA-256 hash and a short visible prefix are stored, as
// for developers' API keys. The bootstrap token from PORTAL_ADMIN_TOKEN is
// accepted too, so a fresh installation can be driven by scripts before any
// token exists.
package optokens

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SecretPrefix starts every operator token, so that a leaked token is
// recognisable by secret scanners and cannot be confused with a developer's
// API key ("sk_live_...").
const SecretPrefix = "sluice_op_"

// secretRandomChars is the number of random base62 characters after
// SecretPrefix: 43 characters carry more than 256 bits.
const secretRandomChars = 43

// visiblePrefixLen is how much of a token is stored and shown in lists
// ("sluice_op_" plus four random characters), enough to tell tokens apart
// without weakening them.
const visiblePrefixLen = len(SecretPrefix) + 4

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Errors returned by Store. Callers compare with errors.Is.
var (
	// ErrNotFound means no token has the given id.
	ErrNotFound = errors.New("operator token not found")
	// ErrInvalidToken means a presented secret is malformed, unknown or
	// revoked, or belongs to a user who is no longer an operator. The
	// admin API answers 401 without saying which.
	ErrInvalidToken = errors.New("invalid operator token")
)

// Token is a stored operator token. The secret itself is never kept.
type Token struct {
	ID     int64 `json:"id" db:"id"`
	UserID int64 `json:"user_id" db:"user_id"`
	// OwnerEmail is the email of the operator the token acts for.
	OwnerEmail string     `json:"owner_email" db:"owner_email"`
	Name       string     `json:"name" db:"name"`
	Prefix     string     `json:"prefix" db:"prefix"`
	RevokedAt  *time.Time `json:"revoked_at" db:"revoked_at"`
	LastUsedAt *time.Time `json:"last_used_at" db:"last_used_at"`
	CreatedAt  time.Time  `json:"created_at" db:"created_at"`
}

// Principal is who an authenticated admin API call acts as.
type Principal struct {
	// TokenID is the operator token used; zero for the bootstrap token.
	TokenID int64
	// UserID is the operator who owns the token; zero for the bootstrap token.
	UserID int64
	// Bootstrap is true when the caller presented PORTAL_ADMIN_TOKEN.
	Bootstrap bool
}

// Actor is the principal as recorded in the audit log: "token:<id>" or
// "bootstrap".
func (p Principal) Actor() string {
	if p.Bootstrap {
		return "bootstrap"
	}
	return fmt.Sprintf("token:%d", p.TokenID)
}

// Generate returns a new random token secret: SecretPrefix followed by 43
// base62 characters from crypto/rand.
func Generate() (string, error) {
	var b strings.Builder
	b.Grow(len(SecretPrefix) + secretRandomChars)
	b.WriteString(SecretPrefix)
	// Rejection sampling keeps every base62 character equally likely:
	// bytes >= 248 (the largest multiple of 62 below 256) are discarded.
	buf := make([]byte, 64)
	for n := 0; n < secretRandomChars; {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("generate operator token: %w", err)
		}
		for _, c := range buf {
			if c >= 248 {
				continue
			}
			b.WriteByte(base62[c%62])
			n++
			if n == secretRandomChars {
				break
			}
		}
	}
	return b.String(), nil
}

// Hash is the SHA-256 of a secret, the only form in which tokens are stored.
func Hash(secret string) [32]byte {
	return sha256.Sum256([]byte(secret))
}

// PrefixOf is the visible start of a secret kept for display ("sluice_op_4fQz").
func PrefixOf(secret string) string {
	if len(secret) < visiblePrefixLen {
		return secret
	}
	return secret[:visiblePrefixLen]
}

// WellFormed reports whether secret has the shape Generate produces, so that
// typos and foreign credentials are refused without a database query.
func WellFormed(secret string) bool {
	rest, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok || len(rest) != secretRandomChars {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(base62, rest[i]) < 0 {
			return false
		}
	}
	return true
}
