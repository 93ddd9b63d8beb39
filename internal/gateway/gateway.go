// Package gateway holds Sluice's ways in for APIs that the portal does not
// serve itself: the forward-auth decision endpoint that nginx
// (auth_request), Caddy (forward_auth) and Traefik (ForwardAuth) ask before
// they proxy, Envoy's rate-limit service, and a reverse proxy for services
// with an upstream URL. Each turns its protocol's request into a route of a
// declared service and hands it to the engine's middleware, so a request
// consumes exactly what it would through the embedded middleware, and a
// subject's limits are shared whichever way its requests arrive.
package gateway

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/services"
)

// Catalogs gives the current services catalog; the snapshot holder's
// current snapshot provides it.
type Catalogs interface {
	Catalog() *services.Catalog
}

// Enforcer is the engine's middleware as the ways in use it:
// *httplimit.Middleware.
type Enforcer interface {
	Enforce(w http.ResponseWriter, r *http.Request, route string, next http.Handler)
}

// CatalogFunc adapts a function, such as one reading the snapshot holder's
// current snapshot, to Catalogs.
type CatalogFunc func() *services.Catalog

// Catalog calls f.
func (f CatalogFunc) Catalog() *services.Catalog { return f() }
