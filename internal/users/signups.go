package users

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A confirmed sign-up is how a developer account is made when the portal
// sends email: StartSignup keeps the sign-up (its email, its password's
// hash, its plan) under a random token mailed to the address, and
// ConfirmSignup makes the account when the token comes back with the same
// password. Until then there is no account: the address can still sign up,
// sign-in knows no such email, and nothing is owned, so neither a sign-up
// nor a later sign-in tells whether an address was registered, and no one
// holds an address they cannot read mail at.

// SignupTTL is how long a confirmation link works.
const SignupTTL = 24 * time.Hour

// ErrSignupInvalid means the confirmation token is unknown, used or
// expired, or its address got an account meanwhile.
var ErrSignupInvalid = errors.New("sign-up link is invalid, used or expired")

const (
	insertSignup = `
INSERT INTO signup_confirmations (token_hash, email, password_hash, plan_id, expires_at) VALUES ($1, $2, $3, $4, $5)`
	// Links long expired go as new ones come, so the table stays small.
	deleteOldSignups = `DELETE FROM signup_confirmations WHERE expires_at < $1::timestamptz - interval '7 days'`
	selectSignup     = `
SELECT email, password_hash, plan_id FROM signup_confirmations
WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2`
	// claimSignup marks the link used in the statement that checks it, so
	// two uses at once cannot both make the account.
	claimSignup = `
UPDATE signup_confirmations SET used_at = $2
WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2
RETURNING email, password_hash, plan_id`
	insertHashedUser = `
INSERT INTO users (email, password_hash, role, plan_id)
VALUES ($1, $2, 'developer', $3)
RETURNING ` + userColumns
	selectEmailTaken = `SELECT EXISTS (SELECT 1 FROM users WHERE lower(email) = lower($1))`
)

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// StartSignup validates nu (a developer: ValidateSignup), hashes its
// password and keeps it under a new token, returned with its expiry, to be
// mailed to nu.Email. An address that has an account is ErrEmailTaken,
// after the same hashing, so the time taken does not tell. Validation
// failures are FieldErrors.
func (r *Repo) StartSignup(ctx context.Context, nu NewUser, now time.Time) (string, time.Time, error) {
	nu.Email = strings.TrimSpace(nu.Email)
	if fe := ValidateSignup(nu.Email, nu.Password); fe != nil {
		return "", time.Time{}, fe
	}
	hash, err := HashPassword(nu.Password)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("start sign-up: %w", err)
	}
	var taken bool
	if err := r.db.QueryRow(ctx, selectEmailTaken, nu.Email).Scan(&taken); err != nil {
		return "", time.Time{}, fmt.Errorf("start sign-up: %w", err)
	}
	if taken {
		return "", time.Time{}, ErrEmailTaken
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", time.Time{}, fmt.Errorf("sign-up token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	expires := now.Add(SignupTTL)
	if _, err := r.db.Exec(ctx, deleteOldSignups, now); err != nil {
		return "", time.Time{}, fmt.Errorf("start sign-up: %w", err)
	}
	if _, err := r.db.Exec(ctx, insertSignup, tokenHash(token), nu.Email, hash, nu.PlanID, expires); err != nil {
		return "", time.Time{}, fmt.Errorf("start sign-up: %w", mapError(err))
	}
	return token, expires, nil
}

// PendingSignup returns the email a usable confirmation token is for, or
// ErrSignupInvalid.
func (r *Repo) PendingSignup(ctx context.Context, token string, now time.Time) (string, error) {
	var email, hash string
	var plan *int64
	err := r.db.QueryRow(ctx, selectSignup, tokenHash(token), now).Scan(&email, &hash, &plan)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrSignupInvalid
	}
	if err != nil {
		return "", fmt.Errorf("pending sign-up: %w", err)
	}
	return email, nil
}

// ConfirmSignup makes the developer account of a pending sign-up when
// password is the one chosen at sign-up, and uses the token up. A wrong
// password is ErrBadCredentials and leaves the token usable; an unknown,
// used or expired token, or an address that got an account meanwhile, is
// ErrSignupInvalid. The password check costs the same whether or not the
// token is known. Run it in a transaction, so that the claim and the
// account commit together.
func (r *Repo) ConfirmSignup(ctx context.Context, token, password string, now time.Time) (User, error) {
	var email, hash string
	var plan *int64
	err := r.db.QueryRow(ctx, selectSignup, tokenHash(token), now).Scan(&email, &hash, &plan)
	if errors.Is(err, pgx.ErrNoRows) {
		CheckPassword(r.dummy(), password)
		return User{}, ErrSignupInvalid
	}
	if err != nil {
		return User{}, fmt.Errorf("confirm sign-up: %w", err)
	}
	if !CheckPassword(hash, password) {
		return User{}, ErrBadCredentials
	}
	err = r.db.QueryRow(ctx, claimSignup, tokenHash(token), now).Scan(&email, &hash, &plan)
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, ErrSignupInvalid
	}
	if err != nil {
		return User{}, fmt.Errorf("confirm sign-up: %w", err)
	}
	u, err := scanUser(r.db.QueryRow(ctx, insertHashedUser, email, hash, plan))
	if err != nil {
		err = mapError(err)
		if errors.Is(err, ErrEmailTaken) {
			return User{}, ErrSignupInvalid
		}
		return User{}, fmt.Errorf("confirm sign-up: %w", err)
	}
	return u, nil
}
