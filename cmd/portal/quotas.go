package main

import (
	"context"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/ledger"
)

// adminStore is the admin API's store: its reads go to the dashboards'
// store, its quota grants and resets through the ledger, which records
// them so a counter rebuilt after Redis lost it keeps them.
type adminStore struct {
	enforce.Store
	ledger *ledger.Ledger
}

func (s adminStore) GrantQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error) {
	return s.ledger.GrantQuota(ctx, req, units)
}

func (s adminStore) ResetQuota(ctx context.Context, req enforce.Request) (enforce.LayerResult, error) {
	return s.ledger.ResetQuota(ctx, req)
}
