// Package sampleapi is the demo API that Sluice protects: an expensive
// search, a cheap item lookup, asynchronous reports whose tier queues, and the
// caller's rate-limit status. The portal mounts it under /api/; its limits come
// from the enforce.Resolver given to the middleware (DemoResolver until the
// control plane supplies plans).
package sampleapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/enforce/httplimit"
)

// The sample API's route patterns: plan limits name them in Limit.Route.
const (
	RouteSearch       = "GET /api/search"
	RouteItem         = "GET /api/items/{id}"
	RouteCreateReport = "POST /api/reports"
	RouteJob          = "GET /api/jobs/{id}"
	RouteStatus       = "GET /api/rate-limit-status"
)

// ReducedAnswerRoutes lists the routes that answer a caller over a
// degrade-mode tier with a cached or reduced answer; on the others degrade
// would serve the full answer, so the plans service refuses it there.
func ReducedAnswerRoutes() []string { return []string{RouteSearch} }

// Defaults for Options' zero fields.
const (
	DefaultCatalogueSize = 5000
	DefaultJobDuration   = 2 * time.Second
	DefaultMaxJobs       = 1000
)

const (
	maxBodyBytes    = 16 << 10
	maxQueryLength  = 200
	searchPageSize  = 20
	reducedScan     = 500
	reducedPageSize = 5
	searchCacheSize = 256
)

// Options configures New. The zero value is usable.
type Options struct {
	// Logger receives internal errors (nil discards them).
	Logger *slog.Logger
	// Now is the clock of job progress (nil means time.Now).
	Now func() time.Time
	// CatalogueSize is how many items the catalogue holds (0 means
	// DefaultCatalogueSize); it sets how expensive a search is.
	CatalogueSize int
	// JobDuration is how long a report runs once started (0 means
	// DefaultJobDuration).
	JobDuration time.Duration
	// MaxJobs bounds the job table (0 means DefaultMaxJobs).
	MaxJobs int
}

// API is the sample API. It is an http.Handler serving the routes above, each
// wrapped by the middleware except the status route, which reads limits
// without spending them.
type API struct {
	mux     *http.ServeMux
	log     *slog.Logger
	now     func() time.Time
	cat     *catalogue
	jobs    *jobTable
	jobTime time.Duration

	cacheMu sync.Mutex
	cache   map[string]searchResult
}

// New returns the sample API enforced by mw. Mount it with
// mux.Handle("/api/", api): its own ServeMux matches the patterns above, so
// the middleware sees them in r.Pattern. A nil mw serves the API without any
// enforcement (and without RouteStatus), the baseline of the end-to-end
// benchmark.
func New(mw *httplimit.Middleware, opts Options) *API {
	a := &API{
		mux:     http.NewServeMux(),
		log:     opts.Logger,
		now:     opts.Now,
		jobTime: opts.JobDuration,
		cache:   make(map[string]searchResult, searchCacheSize),
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.jobTime <= 0 {
		a.jobTime = DefaultJobDuration
	}
	size := opts.CatalogueSize
	if size <= 0 {
		size = DefaultCatalogueSize
	}
	maxJobs := opts.MaxJobs
	if maxJobs <= 0 {
		maxJobs = DefaultMaxJobs
	}
	a.cat = newCatalogue(size)
	a.jobs = newJobTable(maxJobs)

	if mw == nil {
		// Unprotected, for measuring what enforcement costs; there are no
		// limits to report, so the status route is absent.
		a.mux.HandleFunc(RouteSearch, a.search)
		a.mux.HandleFunc(RouteItem, a.item)
		a.mux.HandleFunc(RouteCreateReport, a.createReport)
		a.mux.HandleFunc(RouteJob, a.job)
		return a
	}
	a.mux.Handle(RouteSearch, mw.Wrap(http.HandlerFunc(a.search)))
	a.mux.Handle(RouteItem, mw.Wrap(http.HandlerFunc(a.item)))
	a.mux.Handle(RouteCreateReport, mw.WrapAsync(http.HandlerFunc(a.createReport)))
	a.mux.Handle(RouteJob, mw.Wrap(http.HandlerFunc(a.job)))
	a.mux.Handle(RouteStatus, mw.StatusHandler())
	return a
}

// ServeHTTP dispatches to the sample API's routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mux.ServeHTTP(w, r)
}

// searchResult is the body of GET /api/search.
type searchResult struct {
	Query string `json:"query"`
	Total int    `json:"total"`
	Items []Item `json:"items"`
	// Degraded is true when the caller is over a degrade-mode limit and got
	// a cached (Cached) or reduced (Reduced: fewer items searched, fewer
	// returned) answer.
	Degraded bool `json:"degraded"`
	Cached   bool `json:"cached"`
	Reduced  bool `json:"reduced"`
}

func (a *API) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("q")
	switch {
	case q == "":
		writeError(w, http.StatusBadRequest, "invalid_query", "Query parameter q is required.")
		return
	case len(q) > maxQueryLength || !utf8.ValidString(q):
		writeError(w, http.StatusBadRequest, "invalid_query",
			fmt.Sprintf("Query parameter q must be valid UTF-8 of at most %d bytes.", maxQueryLength))
		return
	}
	if httplimit.Degraded(r.Context()) {
		a.cacheMu.Lock()
		res, ok := a.cache[q]
		a.cacheMu.Unlock()
		if ok {
			res.Degraded, res.Cached = true, true
			writeJSON(w, http.StatusOK, res)
			return
		}
		items, total := a.cat.search(q, reducedScan, reducedPageSize)
		writeJSON(w, http.StatusOK, searchResult{Query: q, Total: total, Items: items, Degraded: true, Reduced: true})
		return
	}
	items, total := a.cat.search(q, len(a.cat.items), searchPageSize)
	res := searchResult{Query: q, Total: total, Items: items}
	a.remember(q, res)
	writeJSON(w, http.StatusOK, res)
}

// remember caches a full answer for degraded callers. The cache is bounded:
// when full, an arbitrary entry makes room (map order), which is enough for a
// fallback whose only promise is "maybe stale".
func (a *API) remember(q string, res searchResult) {
	a.cacheMu.Lock()
	defer a.cacheMu.Unlock()
	if _, ok := a.cache[q]; !ok && len(a.cache) >= searchCacheSize {
		for k := range a.cache {
			delete(a.cache, k)
			break
		}
	}
	a.cache[q] = res
}

func (a *API) item(w http.ResponseWriter, r *http.Request) {
	// The id is typed as an integer in the OpenAPI document, which promises
	// 400 for one that is not; a number that names no item is 404.
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("The item id %q is not a whole number.", r.PathValue("id")))
		return
	}
	it, ok := a.cat.get(id)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("No item with id %q.", r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, it)
}

// reportRequest is the body of POST /api/reports.
type reportRequest struct {
	// Query selects the items the report covers; "" covers all.
	Query string `json:"query"`
}

// jobBody is the body of POST /api/reports and GET /api/jobs/{id}.
type jobBody struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	StatusURL string    `json:"status_url"`
	Query     string    `json:"query"`
	CreatedAt time.Time `json:"created_at"`
	StartsAt  time.Time `json:"starts_at"`
	// Result is set once the job is done.
	Result *reportResult `json:"result,omitempty"`
}

type reportResult struct {
	Items             int   `json:"items"`
	AveragePriceCents int64 `json:"average_price_cents"`
}

func (a *API) createReport(w http.ResponseWriter, r *http.Request) {
	var req reportRequest
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large",
				fmt.Sprintf("The request body must be at most %d bytes.", maxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_body",
			`The body must be a JSON object such as {"query": "lantern"}; `+err.Error())
		return
	}
	if len(req.Query) > maxQueryLength || !utf8.ValidString(req.Query) {
		writeError(w, http.StatusBadRequest, "invalid_query",
			fmt.Sprintf("Field query must be valid UTF-8 of at most %d bytes.", maxQueryLength))
		return
	}
	caller, _ := httplimit.CallerFrom(r.Context())
	now := a.now()
	// The queue tier's wait is spent by the job, not the connection: the
	// client gets its status URL now and the job starts when its turn comes.
	var wait time.Duration
	if d, ok := httplimit.DecisionFrom(r.Context()); ok {
		wait = d.Delay
	}
	j, err := a.jobs.add(&job{owner: caller.Subject, query: req.Query, created: now, startAt: now.Add(wait), doneAt: now.Add(wait + a.jobTime)}, now)
	if errors.Is(err, errJobsFull) {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(a.jobTime/time.Second)+1, 10))
		writeError(w, http.StatusServiceUnavailable, "too_many_jobs", "Too many reports are running; retry shortly.")
		return
	}
	if err != nil {
		a.log.ErrorContext(r.Context(), "creating report job", "err", err)
		writeError(w, http.StatusInternalServerError, "internal_error", "Internal error.")
		return
	}
	body := a.jobBody(j, now)
	w.Header().Set("Location", body.StatusURL)
	writeJSON(w, http.StatusAccepted, body)
}

func (a *API) job(w http.ResponseWriter, r *http.Request) {
	caller, _ := httplimit.CallerFrom(r.Context())
	j, ok := a.jobs.get(r.PathValue("id"))
	// Someone else's job is as absent as a job that never existed: ids
	// must not be probed for.
	if !ok || j.owner != caller.Subject {
		writeError(w, http.StatusNotFound, "not_found", "No such job.")
		return
	}
	writeJSON(w, http.StatusOK, a.jobBody(j, a.now()))
}

func (a *API) jobBody(j *job, now time.Time) jobBody {
	b := jobBody{
		ID: j.id, Status: j.status(now), StatusURL: "/api/jobs/" + j.id, Query: j.query,
		CreatedAt: j.created.UTC(), StartsAt: j.startAt.UTC(),
	}
	if b.Status == "done" {
		b.Result = a.report(j.query)
	}
	return b
}

// report computes a finished job's result from the catalogue.
func (a *API) report(query string) *reportResult {
	var items []Item
	if query == "" {
		items = a.cat.items
	} else {
		items, _ = a.cat.search(query, len(a.cat.items), len(a.cat.items))
	}
	res := &reportResult{Items: len(items)}
	if len(items) > 0 {
		var sum int64
		for _, it := range items {
			sum += int64(it.PriceCents)
		}
		res.AveragePriceCents = sum / int64(len(items))
	}
	return res
}

// errorBody is the JSON body of the sample API's own errors, shaped like the
// middleware's.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Error: code, Message: message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// A failed write means the client is gone; nothing to tell anyone.
	_ = json.NewEncoder(w).Encode(v)
}
