// Package bootstrap prepares a new Sluice installation on its first start:
// the first operator account and, unless turned off, demo plans with
// per-endpoint tiers on the sample API. Running it again changes nothing.
package bootstrap

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/users"
)

// Actor is the audit-log actor of everything bootstrap writes.
const Actor = "bootstrap"

// Options says what to create.
type Options struct {
	// AdminEmail is the operator to create if absent.
	AdminEmail string
	// AdminPassword is that operator's password; empty generates one, which
	// Result.GeneratedPassword returns (once: it is not stored anywhere).
	AdminPassword string
	// Demo seeds the demo plans on an installation that never had any.
	Demo   bool
	Logger *slog.Logger
}

// Result says what Run created.
type Result struct {
	// OperatorCreated is true when this run created the operator.
	OperatorCreated bool
	OperatorEmail   string
	// GeneratedPassword is set only when this run created the operator with
	// a generated password. Show it to the person starting the portal once;
	// never log it.
	GeneratedPassword string
	// PlansCreated lists the slugs of the demo plans this run created.
	PlansCreated []string
}

// lockKey serialises bootstrap across instances starting together.
const lockKey = 0x51_75_1c_e0 // "sluice" bootstrap

// Run creates the operator named by opts if no user has that email, and the
// demo plans if opts.Demo and no plan was ever seeded or created. All in one
// transaction, audit-logged as Actor: a failure leaves nothing behind.
func Run(ctx context.Context, pool *pgxpool.Pool, opts Options) (Result, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var res Result
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		var err error
		if res, err = ensureOperator(ctx, tx, opts); err != nil {
			return err
		}
		if opts.Demo {
			if res.PlansCreated, err = seedDemo(ctx, tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("bootstrap: %w", err)
	}
	if res.OperatorCreated {
		opts.Logger.Info("bootstrap operator created", "email", res.OperatorEmail, "password_generated", res.GeneratedPassword != "")
	}
	if len(res.PlansCreated) > 0 {
		opts.Logger.Info("demo plans seeded", "plans", res.PlansCreated)
	}
	return res, nil
}

func ensureOperator(ctx context.Context, tx pgx.Tx, opts Options) (Result, error) {
	res := Result{OperatorEmail: opts.AdminEmail}
	repo := users.NewRepo(tx)
	existing, err := repo.ByEmail(ctx, opts.AdminEmail)
	if err == nil {
		if existing.Role != users.RoleOperator {
			opts.Logger.Warn("the configured admin email belongs to a developer account; it was not made an operator", "email", opts.AdminEmail)
		}
		return res, nil
	}
	if !errors.Is(err, users.ErrNotFound) {
		return res, err
	}
	pw := opts.AdminPassword
	if pw == "" {
		pw = generatePassword()
		res.GeneratedPassword = pw
	}
	u, err := repo.Create(ctx, users.NewUser{Email: opts.AdminEmail, Password: pw, Role: users.RoleOperator})
	if err != nil {
		return res, fmt.Errorf("create operator: %w", err)
	}
	if err := audit.Record(ctx, tx, Actor, "user.create", audit.ObjectUser, strconv.FormatInt(u.ID, 10), nil, u); err != nil {
		return res, err
	}
	res.OperatorCreated = true
	return res, nil
}

// generatePassword returns 24 URL-safe characters (144 random bits).
func generatePassword() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
