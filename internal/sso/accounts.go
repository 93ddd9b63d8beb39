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
	// Two first sign-ins of one person can run at once (two tabs, a double
	// click): the unique email and the identity's primary key decide which
	// one makes the account and the link, and the other, which waited on
	// the conflicting row, takes what the first made instead of failing.
	insertIdentity = `INSERT INTO sso_identities (issuer, subject, user_id, email) VALUES ($1, $2, $3, $4)
ON CONFLICT (issuer, subject) DO NOTHING`
	insertSSOUser = `INSERT INTO users (email, password_hash, role, plan_id) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING id`
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
	res, found, err := linkedAccount(ctx, tx, id)
	if err != nil || found {
		return res, err
	}
	// A new identity: an account is found or made only by an email the
	// provider vouches for.
	if !id.EmailVerified || id.Email == "" {
		return SignInResult{}, ErrEmailUnverified
	}
	repo := users.NewRepo(tx)
	u, err := repo.ByEmail(ctx, id.Email)
	res = SignInResult{User: u, Linked: true}
	if errors.Is(err, users.ErrNotFound) {
		made, created, cerr := createAccount(ctx, tx, id.Email, role, defaultPlan)
		switch {
		case cerr != nil:
			return SignInResult{}, cerr
		case created:
			res, err = SignInResult{User: made, Created: true}, nil
		default:
			// Someone else made the account with this email since it was
			// looked up: a concurrent first sign-in, or a sign-up.
			u, err = repo.ByEmail(ctx, id.Email)
			res = SignInResult{User: u, Linked: true}
		}
	}
	switch {
	case err != nil:
		return SignInResult{}, fmt.Errorf("sso account: %w", err)
	case res.User.DisabledAt != nil || (res.User.Role == users.RoleOperator) != (role == users.RoleOperator):
		// Refused by SignIn; nothing is linked for a sign-in that fails.
		return res, nil
	}
	tag, err := tx.Exec(ctx, insertIdentity, id.Issuer, id.Subject, res.User.ID, clip(id.Email))
	if err != nil {
		return SignInResult{}, fmt.Errorf("link sso identity: %w", err)
	}
	if tag.RowsAffected() == 0 {
		// A concurrent sign-in of the same identity linked it first: this
		// one signs in to what that one linked, and audits nothing.
		res, found, err := linkedAccount(ctx, tx, id)
		if err == nil && !found {
			err = errors.New("sso identity vanished after a conflicting link")
		}
		return res, err
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

// linkedAccount returns the account id is linked to, recording this
// sign-in on the link; found is false when the identity is new.
func linkedAccount(ctx context.Context, tx pgx.Tx, id Identity) (res SignInResult, found bool, err error) {
	var userID int64
	err = tx.QueryRow(ctx, selectIdentity, id.Issuer, id.Subject).Scan(&userID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return SignInResult{}, false, nil
	case err != nil:
		return SignInResult{}, false, fmt.Errorf("sso identity: %w", err)
	}
	if _, err := tx.Exec(ctx, touchIdentity, id.Issuer, id.Subject, clip(id.Email)); err != nil {
		return SignInResult{}, false, fmt.Errorf("sso identity: %w", err)
	}
	u, err := users.NewRepo(tx).ByID(ctx, userID)
	if err != nil {
		return SignInResult{}, false, fmt.Errorf("sso identity: %w", err)
	}
	return SignInResult{User: u}, true, nil
}

// createAccount makes the account for email; made is false when an
// account with that email appeared since the caller looked (the unique
// email refused the second).
func createAccount(ctx context.Context, tx pgx.Tx, email, role string, defaultPlan *int64) (u users.User, made bool, err error) {
	var plan *int64
	if role == users.RoleDeveloper {
		if defaultPlan == nil {
			return users.User{}, false, ErrNoPlan
		}
		plan = defaultPlan
	}
	if fe := users.ValidateSignup(email, "unused: no password is set"); fe["email"] != "" {
		return users.User{}, false, fmt.Errorf("%w: email %s", ErrEmailUnverified, fe["email"])
	}
	var id int64
	err = tx.QueryRow(ctx, insertSSOUser, email, noPassword, role, plan).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return users.User{}, false, nil
	case err != nil:
		return users.User{}, false, fmt.Errorf("create sso account: %w", err)
	}
	u, err = users.NewRepo(tx).ByID(ctx, id)
	if err != nil {
		return users.User{}, false, fmt.Errorf("create sso account: %w", err)
	}
	return u, true, nil
}

// clip keeps an email within the column's bound (the link is by issuer and
// subject; the email is for people reading the table).
func clip(email string) string {
	if len(email) > 254 {
		return email[:254]
	}
	return email
}
