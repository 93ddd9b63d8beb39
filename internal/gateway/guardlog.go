package gateway

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/requestlog"
)

// GuardLogPath is where the guard package reports the decisions it made,
// for the request log: guard decides in the protected service's own
// process, so only it sees the upstream's status and latency.
const GuardLogPath = "POST /v1/policy/log"

// MaxGuardLogBatch bounds the entries of one report.
const MaxGuardLogBatch = 1000

// GuardLogEntry is one decision as guard reports it (the request log's
// Entry in JSON; the way in is always guard, whatever is sent).
type GuardLogEntry struct {
	At             time.Time  `json:"at"`
	Outcome        string     `json:"outcome"`
	Plan           string     `json:"plan,omitempty"`
	Route          string     `json:"route,omitempty"`
	KeyID          int64      `json:"key_id,omitempty"`
	UserID         int64      `json:"user_id,omitempty"`
	Addr           netip.Addr `json:"addr,omitzero"`
	Layer          string     `json:"layer,omitempty"`
	RetryAfterMS   int64      `json:"retry_after_ms,omitempty"`
	StoreDegraded  string     `json:"store_degraded,omitempty"`
	Status         int        `json:"status,omitempty"`
	UpstreamStatus int        `json:"upstream_status,omitempty"`
	LatencyMS      float64    `json:"latency_ms,omitempty"`
}

// FromEntry is e as guard reports it.
func FromEntry(e requestlog.Entry) GuardLogEntry {
	return GuardLogEntry{At: e.At, Outcome: e.Outcome.String(), Plan: e.Plan, Route: e.Route, KeyID: e.KeyID, UserID: e.UserID,
		Addr: e.Addr, Layer: e.Layer, RetryAfterMS: e.RetryAfter.Milliseconds(), StoreDegraded: e.StoreDegraded,
		Status: e.Status, UpstreamStatus: e.UpstreamStatus, LatencyMS: float64(e.Latency.Microseconds()) / 1000}
}

// RequestLogSink takes entries for the request log (requestlog.Writer).
type RequestLogSink interface {
	Log(requestlog.Entry)
}

// GuardLog serves GuardLogPath to holders of a service token: a JSON array
// of at most MaxGuardLogBatch GuardLogEntry, answered 204 once they are
// handed to the request log (which writes off the request path and may
// sample admissions as for every way in). 400 for a malformed report (none
// of it is logged), 401 for a bad token, 413 past the batch bound.
type GuardLog struct {
	tokens TokenAuthenticator
	sink   RequestLogSink
	log    *slog.Logger
}

// NewGuardLog returns the endpoint writing into sink.
func NewGuardLog(tokens TokenAuthenticator, sink RequestLogSink, logger *slog.Logger) *GuardLog {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &GuardLog{tokens: tokens, sink: sink, log: logger}
}

func (g *GuardLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || secret == "" {
		writeProblem(w, http.StatusUnauthorized, "missing_token", "Send a service token as Authorization: Bearer sluice_svc_...")
		return
	}
	if _, err := g.tokens.Authenticate(r.Context(), secret); err != nil {
		writeProblem(w, http.StatusUnauthorized, "invalid_token", "The service token is unknown or revoked.")
		return
	}
	var batch []GuardLogEntry
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(&batch); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, "report_too_large", "A report is at most 1 MiB.")
			return
		}
		writeProblem(w, http.StatusBadRequest, "bad_report", "The body must be a JSON array of decisions.")
		return
	}
	if len(batch) > MaxGuardLogBatch {
		writeProblem(w, http.StatusRequestEntityTooLarge, "report_too_large", "A report holds at most 1000 decisions.")
		return
	}
	entries := make([]requestlog.Entry, len(batch))
	for i, b := range batch {
		o, err := requestlog.ParseOutcome(b.Outcome)
		if err != nil || b.At.IsZero() {
			writeProblem(w, http.StatusBadRequest, "bad_report", "Each decision needs its instant and an outcome: "+requestlog.ErrOutcome.Error()+".")
			return
		}
		entries[i] = requestlog.Entry{At: b.At, WayIn: requestlog.WayGuard, Outcome: o, Plan: b.Plan, Route: b.Route,
			KeyID: b.KeyID, UserID: b.UserID, Addr: b.Addr, Layer: b.Layer, RetryAfter: time.Duration(b.RetryAfterMS) * time.Millisecond,
			StoreDegraded: b.StoreDegraded, Status: b.Status, UpstreamStatus: b.UpstreamStatus,
			Latency: time.Duration(b.LatencyMS * float64(time.Millisecond))}
	}
	for _, e := range entries {
		g.sink.Log(e)
	}
	w.WriteHeader(http.StatusNoContent)
}
