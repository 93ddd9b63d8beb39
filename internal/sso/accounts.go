package sso

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/users"
)

// Errors from Accounts.SignIn (possibly wrapped), besides ErrEmailUnverified
// and users.ErrDisabled.
var (
	// ErrDeveloperAccount means the person's claims make them an operator
	// but the account their email belongs to is a developer's: an
	// operator must change it, the provider's groups never turn a
	// developer account (with its keys and plan) into an operator.
	ErrDeveloperAccount = errors.New("account is a developer account")
	// ErrNoLongerOperator means the account is an operator's but the
	// person's claims no longer make them one.
	ErrNoLongerOperator = errors.New("claims no longer grant the operator role")
	// ErrNoPlan means a developer account would be created but no plan is
	// marked for new developers.
	ErrNoPlan = errors.New("no plan for new developers")
)

// noPassword is the password hash of an account made by SSO: it is no
// argon2id hash, so no password ever matches it (users.CheckPassword).
// An operator's password reset can give the account one later.
const noPassword = "!sso"

// Accounts finds or makes the account an SSO identity signs in to.
type Accounts struct {
	pool *pgxpool.Pool
}

// NewAccounts returns Accounts over pool.
func NewAccounts(pool *pgxpool.Pool) *Accounts { return &Accounts{pool: pool} }

// SignInResult is the account signed in to and how it was found.
type SignInResult struct {
	User users.User
	// Created: the account was made by this sign-in; Linked: an existing
	// account (found by verified email) was linked to the identity by it.
	Created, Linked bool
}

const (
	selectIdentity = `SELECT user_id FROM sso_identities WHERE issuer = $1 AND subject = $2 FOR UPDATE`
	touchIdentity  = `UPDATE sso_identities SET email = $3, last_signed_in = now() WHERE issuer = $1 AND subject = $2`
	insertIdentity = `INSERT INTO sso_identities (issuer, subject, user_id, email) VALUES ($1, $2, $3, $4)`
	insertSSOUser  = `INSERT INTO users (email, password_hash, role, plan_id) VALUES ($1, $2, $3, $4) RETURNING id`
)

// SignIn returns the account for id, who is to have role (from
// Policy.Role): the account linked to the identity; else the account with
// the identity's verified email, which it links; else a new account with
// that role (a developer on defaultPlan, nil meaning ErrNoPlan). Linking and
// creating are audited as the person themselves. The account must then hold
// role: an operator whose claims no longer say so is refused
// (ErrNoLongerOperator), and so is a developer account whose claims say
// operator (ErrDeveloperAccount). A disabled account is users.ErrDisabled.
func (a *Accounts) SignIn(ctx context.Context, id Identity, role string, defaultPlan *int64) (SignInResult, error) {
	var res SignInResult
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		res, err = signIn(ctx, tx, id, role, defaultPlan)
		return err
	})
	if err != nil {
		return SignInResult{}, err
	}
	u := res.User
	switch {
	case u.DisabledAt != nil:
		return SignInResult{}, fmt.Errorf("sso sign-in of user %d: %w", u.ID, users.ErrDisabled)
	case u.Role == users.RoleOperator && role != users.RoleOperator:
		return SignInResult{}, fmt.Errorf("sso sign-in of user %d: %w", u.ID, ErrNoLongerOperator)
	case u.Role == users.RoleDeveloper && role == users.RoleOperator:
		return SignInResult{}, fmt.Errorf("sso sign-in of user %d: %w", u.ID, ErrDeveloperAccount)
	}
	return res, nil
}

func signIn(ctx context.Context, tx pgx.Tx, id Identity, role string, defaultPlan *int64) (SignInResult, error) {
	repo := users.NewRepo(tx)
	var userID int64
	err := tx.QueryRow(ctx, selectIdentity, id.Issuer, id.Subject).Scan(&userID)
	switch {
	case err == nil:
		if _, err := tx.Exec(ctx, touchIdentity, id.Issuer, id.Subject, clip(id.Email)); err != nil {
			return SignInResult{}, fmt.Errorf("sso identity: %w", err)
		}
		u, err := repo.ByID(ctx, userID)
		if err != nil {
			return SignInResult{}, fmt.Errorf("sso identity: %w", err)
		}
		return SignInResult{User: u}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return SignInResult{}, fmt.Errorf("sso identity: %w", err)
	}
	// A new identity: an account is found or made only by an email the
	// provider vouches for.
	if !id.EmailVerified || id.Email == "" {
		return SignInResult{}, ErrEmailUnverified
	}
	u, err := repo.ByEmail(ctx, id.Email)
	res := SignInResult{User: u, Linked: true}
	switch {
	case errors.Is(err, users.ErrNotFound):
		if u, err = createAccount(ctx, tx, id.Email, role, defaultPlan); err != nil {
			return SignInResult{}, err
		}
		res = SignInResult{User: u, Created: true}
	case err != nil:
		return SignInResult{}, fmt.Errorf("sso account: %w", err)
	case u.DisabledAt != nil || (u.Role == users.RoleOperator) != (role == users.RoleOperator):
		// Refused below; nothing is linked for a sign-in that fails.
		return res, nil
	}
	if _, err := tx.Exec(ctx, insertIdentity, id.Issuer, id.Subject, res.User.ID, clip(id.Email)); err != nil {
		return SignInResult{}, fmt.Errorf("link sso identity: %w", err)
	}
	action := "user.sso_link"
	if res.Created {
		action = "user.sso_create"
	}
	actor := fmt.Sprintf("user:%d", res.User.ID)
	after := map[string]any{"user": res.User, "issuer": id.Issuer, "subject": id.Subject}
	if err := audit.Record(ctx, tx, actor, action, audit.ObjectUser, fmt.Sprint(res.User.ID), nil, after); err != nil {
		return SignInResult{}, err
	}
	return res, nil
}

func createAccount(ctx context.Context, tx pgx.Tx, email, role string, defaultPlan *int64) (users.User, error) {
	var plan *int64
	if role == users.RoleDeveloper {
		if defaultPlan == nil {
			return users.User{}, ErrNoPlan
		}
		plan = defaultPlan
	}
	if fe := users.ValidateSignup(email, "unused: no password is set"); fe["email"] != "" {
		return users.User{}, fmt.Errorf("%w: email %s", ErrEmailUnverified, fe["email"])
	}
	var id int64
	if err := tx.QueryRow(ctx, insertSSOUser, email, noPassword, role, plan).Scan(&id); err != nil {
		return users.User{}, fmt.Errorf("create sso account: %w", err)
	}
	u, err := users.NewRepo(tx).ByID(ctx, id)
	if err != nil {
		return users.User{}, fmt.Errorf("create sso account: %w", err)
	}
	return u, nil
}

// clip keeps an email within the column's bound (the link is by issuer and
// subject; the email is for people reading the table).
func clip(email string) string {
	if len(email) > 254 {
		return email[:254]
	}
	return email
}
