// Package users holds Sluice's people: operators, who run the control plane,
// and developers, who sign up, own API keys and are limited by a plan. It
// validates sign-ups, hashes passwords with argon2id and stores users in
// Postgres.
package users

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Roles a user can have.
const (
	// RoleOperator manages plans, keys and users through /admin.
	RoleOperator = "operator"
	// RoleDeveloper consumes the API: owns keys and is limited by a plan.
	RoleDeveloper = "developer"
)

// Errors returned (possibly wrapped) by Repo.
var (
	ErrNotFound = errors.New("user not found")
	// ErrEmailTaken means another user has this email (compared case-insensitively).
	ErrEmailTaken = errors.New("email already registered")
	// ErrBadCredentials means the email is unknown or the password wrong;
	// deliberately the same error for both.
	ErrBadCredentials = errors.New("wrong email or password")
	// ErrConflict means the user changed since the caller read it: reload and retry.
	ErrConflict = errors.New("user was changed by someone else")
	// ErrUnknownPlan means the plan to assign does not exist.
	ErrUnknownPlan = errors.New("plan does not exist")
	// ErrDisabled means the password was right but an operator disabled
	// the account: it cannot sign in until enabled again.
	ErrDisabled = errors.New("account disabled by an operator")
)

// User is a person who can sign in. The password hash never leaves this
// package, so a User is safe to render or encode as JSON.
type User struct {
	ID    int64  `json:"id"`
	Email string `json:"email"`
	Role  string `json:"role"`
	// PlanID is a developer's plan; nil for operators (and for developers on
	// the default plan's fallback).
	PlanID *int64 `json:"plan_id"`
	// Version increases on every update; pass it back to SetPlan.
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// DisabledAt is when an operator disabled the developer (SetDisabled);
	// nil while enabled. A disabled developer cannot sign in.
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
}

// NewUser is the input to Create.
type NewUser struct {
	Email    string
	Password string
	Role     string
	PlanID   *int64
}

// DBTX is the part of pgx the repository needs. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it, so a service can run the repository inside its own
// transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Repo reads and writes users.
type Repo struct {
	db DBTX

	// dummyHash is checked against when an email is unknown, so that
	// Authenticate spends the same time whether or not the account exists.
	dummyOnce sync.Once
	dummyHash string
}

// NewRepo returns a repository on db (a pool, or a transaction for one
// unit of work).
func NewRepo(db DBTX) *Repo {
	return &Repo{db: db}
}

const userColumns = `id, email, role, plan_id, version, created_at, updated_at, disabled_at`

func scanUser(row pgx.Row) (User, error) {
	var u User
	err := row.Scan(&u.ID, &u.Email, &u.Role, &u.PlanID, &u.Version, &u.CreatedAt, &u.UpdatedAt, &u.DisabledAt)
	return u, err
}

const insertUser = `
INSERT INTO users (email, password_hash, role, plan_id)
VALUES ($1, $2, $3, $4)
RETURNING ` + userColumns

// Create validates nu (ValidateSignup, and a known role), hashes the password
// and inserts the user. Validation failures are returned as FieldErrors; an
// email in use (in any letter case) as ErrEmailTaken.
func (r *Repo) Create(ctx context.Context, nu NewUser) (User, error) {
	nu.Email = strings.TrimSpace(nu.Email)
	fe := ValidateSignup(nu.Email, nu.Password)
	if nu.Role != RoleOperator && nu.Role != RoleDeveloper {
		if fe == nil {
			fe = FieldErrors{}
		}
		fe["role"] = "must be operator or developer"
	}
	if fe != nil {
		return User{}, fe
	}
	hash, err := HashPassword(nu.Password)
	if err != nil {
		return User{}, fmt.Errorf("create user: %w", err)
	}
	u, err := scanUser(r.db.QueryRow(ctx, insertUser, nu.Email, hash, nu.Role, nu.PlanID))
	if err != nil {
		return User{}, fmt.Errorf("create user: %w", mapError(err))
	}
	return u, nil
}

const selectByEmail = `SELECT ` + userColumns + `, password_hash FROM users WHERE lower(email) = lower($1)`

// ByEmail returns the user with this email, compared case-insensitively, or
// ErrNotFound.
func (r *Repo) ByEmail(ctx context.Context, email string) (User, error) {
	u, _, err := r.byEmailWithHash(ctx, email)
	return u, err
}

func (r *Repo) byEmailWithHash(ctx context.Context, email string) (User, string, error) {
	var u User
	var hash string
	err := r.db.QueryRow(ctx, selectByEmail, strings.TrimSpace(email)).
		Scan(&u.ID, &u.Email, &u.Role, &u.PlanID, &u.Version, &u.CreatedAt, &u.UpdatedAt, &u.DisabledAt, &hash)
	if err != nil {
		return User{}, "", fmt.Errorf("user by email: %w", mapError(err))
	}
	return u, hash, nil
}

const selectByID = `SELECT ` + userColumns + ` FROM users WHERE id = $1`

// ByID returns the user with this id, or ErrNotFound.
func (r *Repo) ByID(ctx context.Context, id int64) (User, error) {
	u, err := scanUser(r.db.QueryRow(ctx, selectByID, id))
	if err != nil {
		return User{}, fmt.Errorf("user %d: %w", id, mapError(err))
	}
	return u, nil
}

// Authenticate returns the user whose email and password match, or
// ErrBadCredentials; ErrDisabled when they match a disabled developer. An unknown email costs the same password check as a
// known one, so response time does not reveal which emails are registered.
func (r *Repo) Authenticate(ctx context.Context, email, password string) (User, error) {
	u, hash, err := r.byEmailWithHash(ctx, email)
	if errors.Is(err, ErrNotFound) {
		CheckPassword(r.dummy(), password)
		return User{}, ErrBadCredentials
	}
	if err != nil {
		return User{}, fmt.Errorf("authenticate: %w", err)
	}
	if !CheckPassword(hash, password) {
		return User{}, ErrBadCredentials
	}
	// Said only to whoever knows the password, so it reveals nothing
	// about which emails are registered.
	if u.DisabledAt != nil {
		return User{}, fmt.Errorf("authenticate user %d: %w", u.ID, ErrDisabled)
	}
	return u, nil
}

func (r *Repo) dummy() string {
	r.dummyOnce.Do(func() {
		// The hash of a fixed string: it can never match a real password's
		// hash, and only its cost matters.
		r.dummyHash, _ = HashPassword("sluice: no such user")
	})
	return r.dummyHash
}

// ListFilter narrows List. Zero fields do not filter.
type ListFilter struct {
	// Role is RoleOperator or RoleDeveloper.
	Role string
	// PlanID keeps users on this plan.
	PlanID *int64
	// EmailContains keeps users whose email contains it, case-insensitively.
	EmailContains string
	// Limit caps the number of users (default 100, at most 1000); Offset
	// skips that many first, in id order.
	Limit, Offset int
}

const selectList = `
SELECT ` + userColumns + ` FROM users
WHERE ($1 = '' OR role = $1)
  AND ($2::bigint IS NULL OR plan_id = $2)
  AND ($3 = '' OR strpos(lower(email), lower($3)) > 0)
ORDER BY id
LIMIT $4 OFFSET $5`

// List returns users matching f, oldest first.
func (r *Repo) List(ctx context.Context, f ListFilter) ([]User, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	rows, err := r.db.Query(ctx, selectList, f.Role, f.PlanID, f.EmailContains, limit, max(f.Offset, 0))
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (User, error) { return scanUser(row) })
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return list, nil
}

const updatePlan = `
UPDATE users SET plan_id = $2, version = version + 1, updated_at = now()
WHERE id = $1 AND version = $3
RETURNING ` + userColumns

// SetPlan moves user id to planID (nil: none) if the user is still at
// version; it returns the updated user, ErrConflict if someone changed the
// user meanwhile, ErrNotFound or ErrUnknownPlan.
func (r *Repo) SetPlan(ctx context.Context, id int64, planID *int64, version int) (User, error) {
	u, err := scanUser(r.db.QueryRow(ctx, updatePlan, id, planID, version))
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := r.ByID(ctx, id); err != nil {
			return User{}, fmt.Errorf("set plan of user %d: %w", id, err)
		}
		return User{}, fmt.Errorf("set plan of user %d: %w", id, ErrConflict)
	}
	if err != nil {
		return User{}, fmt.Errorf("set plan of user %d: %w", id, mapError(err))
	}
	return u, nil
}

const updatePassword = `
UPDATE users SET password_hash = $2, version = version + 1, updated_at = now()
WHERE id = $1
RETURNING ` + userColumns

// ChangePassword sets user id's password to next after checking current,
// the password it replaces. A wrong current password is ErrBadCredentials;
// a next password that ValidateSignup refuses is a FieldErrors under
// "new_password". The caller ends the user's other sessions.
func (r *Repo) ChangePassword(ctx context.Context, id int64, current, next string) (User, error) {
	u, err := r.ByID(ctx, id)
	if err != nil {
		return User{}, fmt.Errorf("change password: %w", err)
	}
	if _, err := r.Authenticate(ctx, u.Email, current); err != nil {
		return User{}, fmt.Errorf("change password: %w", err)
	}
	if fe := ValidateSignup(u.Email, next); fe["password"] != "" {
		return User{}, FieldErrors{"new_password": fe["password"]}
	}
	if current == next {
		return User{}, FieldErrors{"new_password": "must differ from the current password"}
	}
	hash, err := HashPassword(next)
	if err != nil {
		return User{}, fmt.Errorf("change password: %w", err)
	}
	u, err = scanUser(r.db.QueryRow(ctx, updatePassword, id, hash))
	if err != nil {
		return User{}, fmt.Errorf("change password of user %d: %w", id, mapError(err))
	}
	return u, nil
}

// mapError turns pgx errors into this package's sentinels.
func mapError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505" && pgErr.ConstraintName == "users_email_key":
			return ErrEmailTaken
		case pgErr.Code == "23503" && pgErr.ConstraintName == "users_plan_id_fkey":
			return ErrUnknownPlan
		}
	}
	return err
}

// SetPassword sets user id's password to next without asking for the
// current one: an operator's reset. A next password that ValidateSignup
// refuses is a FieldErrors under "password". The caller ends the user's
// sessions.
func (r *Repo) SetPassword(ctx context.Context, id int64, next string) (User, error) {
	u, err := r.ByID(ctx, id)
	if err != nil {
		return User{}, fmt.Errorf("set password: %w", err)
	}
	if fe := ValidateSignup(u.Email, next); fe["password"] != "" {
		return User{}, FieldErrors{"password": fe["password"]}
	}
	hash, err := HashPassword(next)
	if err != nil {
		return User{}, fmt.Errorf("set password: %w", err)
	}
	u, err = scanUser(r.db.QueryRow(ctx, updatePassword, id, hash))
	if err != nil {
		return User{}, fmt.Errorf("set password of user %d: %w", id, mapError(err))
	}
	return u, nil
}
