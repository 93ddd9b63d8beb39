package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/database"
	"github.com/sluicehq/sluice/internal/pgsession"
	"github.com/sluicehq/sluice/internal/users"
)

const usersUsage = "users reset-password EMAIL"

// cliActor is the audit actor of changes made from the command line: whoever
// can run the binary against the database, which the log cannot name better.
const cliActor = "system"

// runUsers is `portal users reset-password EMAIL`: the way back in for an
// operator who has lost the only password, and for support.
func runUsers(ctx context.Context, cfg Config, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("users needs an action: " + usersUsage)}
	}
	if args[0] != "reset-password" {
		return usageError{fmt.Errorf("unknown users action %q; usage: portal %s", args[0], usersUsage)}
	}
	if len(args) != 2 || args[1] == "" {
		return usageError{fmt.Errorf("users reset-password needs exactly one EMAIL; usage: portal %s", usersUsage)}
	}
	email := args[1]

	// The password goes to stdout once: logs must not carry it, nor mix
	// into the output a script reads.
	st, err := openPortalStore(ctx, cfg, slog.New(slog.DiscardHandler), false)
	if err != nil {
		return err
	}
	defer st.close()
	if err := database.CheckSchema(ctx, st.pool); err != nil {
		return fmt.Errorf("users: %w; run portal migrate up first", err)
	}
	pw, err := users.GeneratePassword()
	if err != nil {
		return err
	}
	var ended int64
	err = pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		repo := users.NewRepo(tx)
		u, err := repo.ByEmail(ctx, email)
		if err != nil {
			return err
		}
		if u, err = repo.SetPassword(ctx, u.ID, pw); err != nil {
			return err
		}
		// Ending every session (keep "") never hashes an identifier, so
		// the store needs no session secret here.
		if ended, err = pgsession.New(tx, nil, pgsession.Options{}).EndUser(ctx, u.ID, ""); err != nil {
			return err
		}
		// The entry names the user and the sessions ended, never the password.
		return audit.Record(ctx, tx, cliActor, "user.reset_password", audit.ObjectUser, strconv.FormatInt(u.ID, 10),
			nil, map[string]any{"email": u.Email, "sessions_ended": ended, "via": "cli"})
	})
	if errors.Is(err, users.ErrNotFound) {
		return fmt.Errorf("users reset-password: no user has the email %q", email)
	}
	if err != nil {
		return fmt.Errorf("users reset-password: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "new password for %s (shown once): %s\nsessions ended: %d\n", email, pw, ended)
	return err
}
