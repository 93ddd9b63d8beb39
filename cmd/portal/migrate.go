package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/sluicehq/sluice/internal/database"
)

// runMigrate is `portal migrate up | down [N|all] | version | force V`, for
// operators who apply migrations separately from starting the server (run
// the portal with -migrate=false then).
func runMigrate(ctx context.Context, cfg Config, args []string, logger *slog.Logger, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("migrate needs an action: up, down [N|all], version or force V")}
	}
	action, rest := args[0], args[1:]
	steps := 0
	switch action {
	case "up", "version":
		if len(rest) > 0 {
			return usageError{fmt.Errorf("migrate %s takes no argument", action)}
		}
	case "down":
		steps = 1
		if len(rest) > 1 {
			return usageError{errors.New("migrate down takes at most one argument: a number of steps, or all")}
		}
		if len(rest) == 1 {
			if rest[0] == "all" {
				steps = 0
			} else if n, err := strconv.Atoi(rest[0]); err == nil && n >= 1 {
				steps = n
			} else {
				return usageError{fmt.Errorf("migrate down %q: want a number of steps (1 or more) or all", rest[0])}
			}
		}
	case "force":
		if len(rest) != 1 {
			return usageError{errors.New("migrate force needs the version to record")}
		}
		if _, err := strconv.Atoi(rest[0]); err != nil {
			return usageError{fmt.Errorf("migrate force %q: want a version number", rest[0])}
		}
	default:
		return usageError{fmt.Errorf("unknown migrate action %q: want up, down [N|all], version or force V", action)}
	}

	if cfg.DatabaseURL == "" {
		if err := checkDataDir(cfg.DataDir); err != nil {
			return err
		}
	}
	st, err := openPortalStore(ctx, cfg, logger, true)
	if err != nil {
		return err
	}
	defer st.close()

	switch action {
	case "up":
		if _, _, err := database.Migrate(ctx, st.pool); err != nil {
			return err
		}
	case "down":
		if err := database.MigrateDown(ctx, st.pool, steps); err != nil {
			return err
		}
	case "force":
		v, _ := strconv.Atoi(rest[0])
		if err := database.ForceVersion(ctx, st.pool, v); err != nil {
			return err
		}
	}
	s, err := database.State(ctx, st.pool)
	if err != nil {
		return err
	}
	dirty := ""
	if s.Dirty {
		dirty = " (dirty)"
	}
	fmt.Fprintf(stdout, "schema version %d%s; this program knows up to %d\n", s.Version, dirty, s.Latest)
	return nil
}
