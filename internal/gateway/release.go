package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/sluicehq/sluice/internal/enforce"
)

// ReleasePath is where a forward-auth caller gives back the concurrency
// slots of a request that completed: POST with HeaderLease.
const ReleasePath = "POST /v1/release"

// HeaderLease carries, on a check's 200, the token of the concurrency
// slots the admitted request holds (absent when its limits have no
// concurrency tier); HeaderLeaseExpires the unix second they are released
// anyway. Send the token back in HeaderLease to ReleasePath when the
// request completes.
const (
	HeaderLease        = "Sluice-Concurrency-Lease"
	HeaderLeaseExpires = "Sluice-Concurrency-Lease-Expires"
)

// LeaseReleaser releases slots by token: *httplimit.Middleware.
type LeaseReleaser interface {
	ReleaseToken(ctx context.Context, token string) error
}

// Release is the endpoint of ReleasePath. nginx's auth_request, Caddy's
// forward_auth and Traefik's ForwardAuth have no completion callback, so
// only a caller that knows when the request ended can use it (the
// upstream, or a log-phase hook such as OpenResty's log_by_lua); without
// it, a concurrency tier through a check holds each slot for the whole
// lease. Answers 204 (released, or nothing left to release), 400 (no or a
// malformed token) or 503 (the store is unreachable; the lease runs out by
// itself).
type Release struct {
	releaser LeaseReleaser
	log      *slog.Logger
}

// NewRelease returns the release endpoint.
func NewRelease(releaser LeaseReleaser, logger *slog.Logger) *Release {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Release{releaser: releaser, log: logger}
}

func (rl *Release) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := r.Header.Get(HeaderLease)
	if token == "" {
		writeProblem(w, http.StatusBadRequest, "missing_lease", "Send the "+HeaderLease+" header of the check's answer.")
		return
	}
	err := rl.releaser.ReleaseToken(r.Context(), token)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, enforce.ErrInvalidRequest):
		writeProblem(w, http.StatusBadRequest, "invalid_lease", "The "+HeaderLease+" header is not a lease token of this portal.")
	default:
		rl.log.WarnContext(r.Context(), "releasing concurrency slots", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "release_unavailable", "The slots could not be released now; they are released when their lease runs out.")
	}
}
