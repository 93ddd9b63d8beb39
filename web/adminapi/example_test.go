package adminapi_test

import (
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/web/adminapi"
)

// The admin API's routes are full paths under adminapi.Prefix, so it is
// mounted on the root mux at that prefix, unchanged.
func ExampleNew() {
	var (
		pool       *pgxpool.Pool // the portal's pool
		store      enforce.Store // the same store the middleware decides with
		logger     = slog.Default()
		routes     = []string{"GET /api/search", "GET /api/items/{id}"}
		adminToken = "" // PORTAL_ADMIN_TOKEN; empty disables the bootstrap token
	)
	mux := http.NewServeMux()
	mux.Handle(adminapi.Prefix+"/", adminapi.New(adminapi.Deps{
		Plans:  plans.NewService(pool, routes, logger),
		Keys:   apikeys.NewService(pool, routes, logger),
		Tokens: optokens.NewStore(pool, adminToken),
		Store:  store,
		Pool:   pool,
		Logger: logger,
	}))
}
