// Package adminapi is Sluice's JSON admin API, mounted at /admin/api/v1:
// services and their routes (and service tokens), plans and their limit
// tiers, API keys, developers, live key usage, the audit log and operator
// tokens. Every route except the OpenAPI document needs an operator token
// ("Authorization: Bearer sluice_op_...") or the bootstrap token; errors are
// RFC 9457 problem+json. The route table in routes.go is the
// single list of endpoints: the mux is built from it and a test holds the
// OpenAPI document (openapi.json) to it.
package adminapi

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/internal/billing"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/metering"
	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/internal/orgs"
	"github.com/sluicehq/sluice/internal/planfile"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/traffic"
	"github.com/sluicehq/sluice/internal/users"
)

// Prefix is where the admin API lives; its route patterns are full paths
// under it, so mount the handler on the root mux at Prefix+"/" unchanged.
const Prefix = "/admin/api/v1"

// Deps is what the admin API needs. Every field is required except Now.
type Deps struct {
	Plans *plans.Service
	Keys  *apikeys.Service
	// Tokens authenticates callers; construct it with PORTAL_ADMIN_TOKEN to
	// accept the bootstrap token.
	Tokens *optokens.Store
	// Store is the engine's counter store, read (never consumed) by the key
	// usage endpoint through Peek.
	Store enforce.Store
	// Pool serves the developer and audit log endpoints.
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Now is the clock used to report key states (default time.Now).
	Now func() time.Time
	// Traffic, when set, is the recorded traffic the playground replays
	// (nil when PORTAL_TRAFFIC_RECORDING is off).
	Traffic *traffic.Recorder
	// Playground runs replays; share one *playground.Runner with the
	// dashboard so that both count against one bound of replays at once.
	// Nil means a Runner of this API's own.
	Playground Replayer
}

// Replayer runs playground replays, refusing with playground.ErrBusy when
// too many run at once; *playground.Runner is one.
type Replayer interface {
	Replay(ctx context.Context, sc playground.Scenario) (playground.Report, error)
}

type api struct {
	plans  *plans.Service
	keys   *apikeys.Service
	tokens *optokens.Store
	store  enforce.Store
	pool   *pgxpool.Pool
	users  *users.Repo
	// services is over Pool: no Deps field, so wiring stays unchanged.
	services *services.Repo
	// planfiles is over Pool and the routes Plans takes, for the same reason.
	planfiles *planfile.Store
	traffic   *traffic.Recorder
	replayer  Replayer
	// metering reads the usage records over Pool.
	metering *metering.Reader
	logger   *slog.Logger
	now      func() time.Time
}

// New returns the admin API handler. Mount it at Prefix+"/":
//
//	mux.Handle(adminapi.Prefix+"/", adminapi.New(deps))
//
// It panics if a required dependency is missing, a wiring mistake better
// found at start-up than on the first request.
func New(d Deps) http.Handler {
	var missing []string
	for name, ok := range map[string]bool{
		"Plans": d.Plans != nil, "Keys": d.Keys != nil, "Tokens": d.Tokens != nil,
		"Store": d.Store != nil, "Pool": d.Pool != nil, "Logger": d.Logger != nil,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		panic("adminapi.New: missing Deps." + strings.Join(missing, ", Deps."))
	}
	a := newAPI(d)
	return withRequestID(a.mux())
}

func newAPI(d Deps) *api {
	now := d.Now
	if now == nil {
		now = time.Now
	}
	replayer := d.Playground
	if replayer == nil {
		replayer = playground.NewRunner(playground.DefaultParallel)
	}
	return &api{
		plans: d.Plans, keys: d.Keys, tokens: d.Tokens, store: d.Store, pool: d.Pool,
		users: users.NewRepo(d.Pool), services: services.NewRepo(d.Pool), logger: d.Logger, now: now,
		planfiles: planfile.ForService(d.Pool, d.Plans), traffic: d.Traffic, replayer: replayer, metering: metering.NewReader(d.Pool),
	}
}

// mux builds the ServeMux from the route table. Each path also gets a
// method-less pattern answering 405 with an Allow header, and the prefix a
// catch-all answering 404, so that even those errors are problem+json.
func (a *api) mux() *http.ServeMux {
	mux := http.NewServeMux()
	allowed := map[string][]string{}
	var paths []string
	for _, rt := range a.routes() {
		var h http.Handler = rt.handler
		if !rt.public {
			h = a.authenticate(h)
		}
		mux.Handle(rt.method+" "+rt.path, h)
		if _, ok := allowed[rt.path]; !ok {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		if rt.method == http.MethodGet {
			allowed[rt.path] = append(allowed[rt.path], http.MethodHead)
		}
	}
	for _, p := range paths {
		allow := strings.Join(allowed[p], ", ")
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, r, Problem{
				Type: typeMethodNotAllowed, Title: "Method not allowed", Status: http.StatusMethodNotAllowed,
				Detail: fmt.Sprintf("%s is not allowed here; use %s.", r.Method, allow),
			})
		})
	}
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, Problem{
			Type: typeNotFound, Title: "Not found", Status: http.StatusNotFound,
			Detail: "No admin API endpoint has this path; see " + Prefix + "/openapi.json.",
		})
	})
	return mux
}

// fail answers err as a problem. Domain errors map to their 4xx status with
// a fixed, safe detail; anything else is logged once with the request id and
// answered "Internal error", never with its text.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		reqErr   *requestError
		planVErr *plans.ValidationError
		tokVErr  *optokens.ValidationError
		ownVErr  *validationError
	)
	switch {
	case errors.As(err, &reqErr):
		writeProblem(w, r, reqErr.problem())
	case errors.As(err, &ownVErr):
		writeProblem(w, r, validationProblem(ownVErr.fields))
	case errors.As(err, &planVErr):
		fields := make([]FieldError, len(planVErr.Fields))
		for i, f := range planVErr.Fields {
			fields[i] = FieldError{Field: f.Field, Message: f.Message}
		}
		writeProblem(w, r, validationProblem(fields))
	case errors.As(err, &tokVErr):
		fields := make([]FieldError, len(tokVErr.Fields))
		for i, f := range tokVErr.Fields {
			fields[i] = FieldError{Field: f.Field, Message: f.Message}
		}
		writeProblem(w, r, validationProblem(fields))
	case errors.Is(err, plans.ErrSlugTaken):
		writeProblem(w, r, Problem{
			Type: typeConflict, Title: "Conflict", Status: http.StatusConflict,
			Detail: "Another plan already uses this slug.",
			Errors: []FieldError{{Field: "slug", Message: "is already taken by another plan"}},
		})
	case errors.Is(err, services.ErrSlugTaken):
		writeProblem(w, r, Problem{
			Type: typeConflict, Title: "Conflict", Status: http.StatusConflict,
			Detail: "Another service already uses this slug.",
			Errors: []FieldError{{Field: "slug", Message: "is already taken by another service"}},
		})
	case errors.Is(err, services.ErrRouteInUse):
		writeProblem(w, r, Problem{
			Type: typeInUse, Title: "Route in use", Status: http.StatusConflict,
			Detail: "A plan's tier names a route this change would remove; change those tiers first.",
		})
	case errors.Is(err, plans.ErrConflict), errors.Is(err, apikeys.ErrConflict), errors.Is(err, users.ErrConflict),
		errors.Is(err, services.ErrConflict):
		writeProblem(w, r, Problem{
			Type: typeStaleVersion, Title: "Stale version", Status: http.StatusConflict,
			Detail: "Someone changed this object after you read it; read it again and reapply your change with the new version.",
		})
	case errors.Is(err, plans.ErrInUse):
		writeProblem(w, r, Problem{
			Type: typeInUse, Title: "Plan in use", Status: http.StatusConflict,
			Detail: "The plan is assigned to live API keys or developers, or is the default or anonymous plan; move them to another plan first.",
		})
	case errors.Is(err, apikeys.ErrTooManyKeys):
		writeProblem(w, r, Problem{
			Type: typeConflict, Title: "Too many keys", Status: http.StatusConflict,
			Detail: "The developer already holds the most active API keys allowed (PORTAL_KEYS_PER_DEVELOPER); revoke one first.",
			Errors: []FieldError{{Field: "user_id", Message: "holds the most active API keys allowed"}},
		})
	case errors.Is(err, apikeys.ErrRevoked):
		writeProblem(w, r, Problem{
			Type: typeConflict, Title: "Key revoked", Status: http.StatusConflict,
			Detail: "The API key is revoked and can no longer be changed.",
		})
	case errors.Is(err, apikeys.ErrExpired):
		writeProblem(w, r, Problem{
			Type: typeConflict, Title: "Key expired", Status: http.StatusConflict,
			Detail: "The API key has expired and can no longer be rotated.",
		})
	case errors.Is(err, plans.ErrNotFound), errors.Is(err, apikeys.ErrNotFound),
		errors.Is(err, users.ErrNotFound), errors.Is(err, optokens.ErrNotFound), errors.Is(err, services.ErrNotFound),
		errors.Is(err, billing.ErrNotFound), errors.Is(err, orgs.ErrNotFound):
		writeProblem(w, r, Problem{
			Type: typeNotFound, Title: "Not found", Status: http.StatusNotFound,
			Detail: notFoundDetail(err),
		})
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody is left to answer, and it is not a
		// server fault worth an error line.
		a.logger.Debug("admin api: request canceled", "request_id", requestID(r.Context()))
	case errors.Is(err, playground.ErrBusy):
		w.Header().Set("Retry-After", "1")
		writeProblem(w, r, Problem{
			Type: typeUnavailable, Title: "Playground busy", Status: http.StatusServiceUnavailable,
			Detail: "Too many replays are running; try again shortly.",
		})
	case errors.Is(err, enforce.ErrStoreUnavailable):
		a.logger.Error("admin api: rate-limit store unavailable",
			"request_id", requestID(r.Context()), "method", r.Method, "pattern", r.Pattern, "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, r, Problem{
			Type: typeUnavailable, Title: "Counters unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The rate-limit store cannot be reached, so live usage is unknown; try again shortly.",
		})
	case a.postgresDown(r.Context()):
		// An unexpected failure while Postgres is unreachable is that
		// outage: a temporary condition, answered as one, as the UI does.
		a.logger.Error("admin api: Postgres unreachable",
			"request_id", requestID(r.Context()), "method", r.Method, "pattern", r.Pattern, "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(postgresRetryAfter))
		writeProblem(w, r, Problem{
			Type: typeUnavailable, Title: "Store of record unavailable", Status: http.StatusServiceUnavailable,
			Detail: "Postgres, which holds plans, keys and users, cannot be reached right now, so the request could not be completed; retry after Retry-After seconds. Enforcement continues on the last snapshot.",
		})
	default:
		id := requestID(r.Context())
		a.logger.Error("admin api: internal error",
			"request_id", id, "method", r.Method, "pattern", r.Pattern, "err", err)
		writeProblem(w, r, Problem{
			Type: typeInternal, Title: internalErrorTitle, Status: http.StatusInternalServerError,
			Detail: fmt.Sprintf(internalErrorDetailFmt, id),
		})
	}
}

// postgresRetryAfter is the Retry-After, in seconds, of a 503 for a
// Postgres outage: long enough not to hammer a database coming back, short
// enough for automation to finish soon after it does.
const postgresRetryAfter = 5

// postgresDown reports whether Postgres fails a ping now, bounded so that an
// unreachable host does not hold the answer for long.
func (a *api) postgresDown(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	return a.pool.Ping(ctx) != nil
}

func validationProblem(fields []FieldError) Problem {
	return Problem{
		Type: typeValidation, Title: "Invalid request", Status: http.StatusBadRequest,
		Detail: "One or more fields are invalid; see errors.", Errors: fields,
	}
}

func notFoundDetail(err error) string {
	switch {
	case errors.Is(err, plans.ErrNotFound):
		return "No plan (or no limit of this plan) has this id."
	case errors.Is(err, apikeys.ErrNotFound):
		return "No API key has this id."
	case errors.Is(err, users.ErrNotFound), errors.Is(err, billing.ErrNotFound):
		return "No developer has this id."
	case errors.Is(err, services.ErrNotFound):
		return "No service has this slug (or no live token of it has this id)."
	case errors.Is(err, orgs.ErrNotFound):
		return "No organisation has this id."
	default:
		return "No operator token has this id."
	}
}
