package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/internal/database"
)

// openPortalStore is the store of record of a command that works on a
// portal's data (plans, users, migrate): DATABASE_URL when set; else the
// embedded database in the data directory, through the server a portal
// already runs there if one does, else started for the command's duration.
// Unless create (migrate's first run), it never creates a cluster: a data
// directory without one is an error naming the directory, not a second,
// empty database.
func openPortalStore(ctx context.Context, cfg Config, logger *slog.Logger, create bool) (*store, error) {
	if cfg.DatabaseURL != "" {
		return openStore(ctx, cfg, logger)
	}
	url, running, err := database.RunningEmbedded(cfg.DataDir)
	if create && errors.Is(err, database.ErrNoCluster) {
		return openStore(ctx, cfg, logger)
	}
	if errors.Is(err, database.ErrNoCluster) {
		return nil, fmt.Errorf("no portal database in PORTAL_DATA_DIR %s: set PORTAL_DATA_DIR to the data directory of the portal to work on (or DATABASE_URL to its Postgres); this command never creates a database", cfg.DataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("PORTAL_DATA_DIR: %w", err)
	}
	if running {
		pool, err := database.Open(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("the embedded postgres a portal runs in %s: %w", cfg.DataDir, err)
		}
		logger.Info("store of record: the running portal's embedded postgres", "data_dir", cfg.DataDir)
		return &store{pool: pool}, nil
	}
	e, err := database.StartEmbedded(ctx, database.EmbeddedConfig{DataDir: cfg.DataDir, Logger: logger, Existing: true})
	if err != nil {
		return nil, fmt.Errorf("embedded postgres in PORTAL_DATA_DIR %s: %w", cfg.DataDir, err)
	}
	pool, err := database.Open(ctx, e.URL())
	if err != nil {
		(&store{embedded: e}).close()
		return nil, fmt.Errorf("embedded postgres: %w", err)
	}
	logger.Info("store of record: embedded postgres", "data_dir", cfg.DataDir)
	return &store{pool: pool, embedded: e}, nil
}
