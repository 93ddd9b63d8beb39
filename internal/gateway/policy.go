package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// PolicyPath is where programs outside the portal fetch the policy they
// enforce.
const PolicyPath = "/v1/policy"

// MaxPolicyWait bounds a long poll's ?wait=.
const MaxPolicyWait = 60 * time.Second

// PolicySource is the snapshot holder as the policy feed reads it.
type PolicySource interface {
	// Version numbers the current snapshot; Policy is the document at it
	// as the service with the given slug needs it (policy.ForRoutes), ok
	// false when no such service is declared.
	Version() uint64
	Policy(version uint64, service string) (d policy.Document, ok bool)
	// Changed is closed at the next rebuild.
	Changed() <-chan struct{}
}

// TokenAuthenticator checks a service token: services.Repo.
type TokenAuthenticator interface {
	Authenticate(ctx context.Context, secret string) (string, error)
}

// PolicyFeed serves GET /v1/policy to holders of a service token
// ("Authorization: Bearer sluice_svc_..."): the policy document (plans'
// limits, key hashes; never a secret) with an ETag, scoped to the service
// the token belongs to: no other service's routes or tiers, and billing
// anchors only where a quota applies to this one. A request with
// If-None-Match naming the current ETag and ?wait=<seconds> (at most 60) is
// a long poll: it is answered as soon as the policy changes, or 304 Not
// Modified when the wait runs out, so a client that polls in a loop sees a
// change within the portal's own rebuild time.
type PolicyFeed struct {
	source PolicySource
	tokens TokenAuthenticator
	log    *slog.Logger

	mu sync.Mutex
	// cached holds each service's encoded document at one version.
	cached map[string]*encodedPolicy
}

type encodedPolicy struct {
	version uint64
	etag    string
	body    []byte
}

// NewPolicyFeed returns the feed of source's policy to holders of tokens.
func NewPolicyFeed(source PolicySource, tokens TokenAuthenticator, logger *slog.Logger) *PolicyFeed {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &PolicyFeed{source: source, tokens: tokens, log: logger}
}

// ErrBadWait is the 400 for a ?wait= that is not whole seconds in range.
var ErrBadWait = errors.New("wait must be whole seconds from 0 to 60")

func (p *PolicyFeed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeProblem(w, http.StatusMethodNotAllowed, "method_not_allowed", "Use GET.")
		return
	}
	scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || secret == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice policy"`)
		writeProblem(w, http.StatusUnauthorized, "service_token_required", "Send a service token as \"Authorization: Bearer sluice_svc_...\".")
		return
	}
	service, err := p.tokens.Authenticate(r.Context(), strings.TrimSpace(secret))
	if err != nil {
		if errors.Is(err, services.ErrBadToken) {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			writeProblem(w, http.StatusUnauthorized, "invalid_service_token", "The service token is unknown or revoked.")
			return
		}
		p.log.ErrorContext(r.Context(), "checking a service token", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "store_unavailable", "The token cannot be checked right now; retry shortly.")
		return
	}
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || time.Duration(n)*time.Second > MaxPolicyWait {
			writeProblem(w, http.StatusBadRequest, "invalid_wait", ErrBadWait.Error())
			return
		}
		wait = time.Duration(n) * time.Second
	}
	// Take the change channel before reading the version: a rebuild in
	// between then closes it, and the wait below returns at once.
	changed := p.source.Changed()
	doc, ok := p.current(service)
	if !ok {
		// The token outlived its service (deleted since): it opens nothing.
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		writeProblem(w, http.StatusUnauthorized, "invalid_service_token", "The service token is unknown or revoked.")
		return
	}
	if match := r.Header.Get("If-None-Match"); match != "" && match == doc.etag {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-changed:
			case <-t.C:
			case <-r.Context().Done():
			}
			t.Stop()
			if doc, ok = p.current(service); !ok {
				writeProblem(w, http.StatusUnauthorized, "invalid_service_token", "The service token is unknown or revoked.")
				return
			}
		}
		if match == doc.etag {
			w.Header().Set("ETag", doc.etag)
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	h := w.Header()
	h.Set("ETag", doc.etag)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(doc.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(doc.body)
	}
}

// current returns the service's encoded document of the current version,
// encoding it once per version however many of its clients poll; ok is
// false when the service is not declared.
func (p *PolicyFeed) current(service string) (*encodedPolicy, bool) {
	v := p.source.Version()
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.cached[service]
	if last != nil && last.version == v {
		return last, true
	}
	d, ok := p.source.Policy(v, service)
	if !ok {
		return nil, false
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(d); err != nil {
		// Plain data always encodes; keep serving the last one if not.
		p.log.Error("encoding the policy", "err", err)
		if last != nil {
			return last, true
		}
	}
	if p.cached == nil || (last == nil && len(p.cached) >= maxCachedPolicies) {
		// Documents of older versions are dropped with the rest; a
		// service's next poll encodes its own again.
		p.cached = map[string]*encodedPolicy{}
	}
	e := &encodedPolicy{version: v, etag: `"` + strconv.FormatUint(v, 10) + `"`, body: buf.Bytes()}
	p.cached[service] = e
	return e, true
}

// maxCachedPolicies bounds the encoded documents kept, one per service.
const maxCachedPolicies = 1024

// Snapshots is the snapshot holder (*snapshot.Holder) as SnapshotPolicy
// reads it.
type Snapshots interface {
	Version() uint64
	Current() *snapshot.Snapshot
	Changed() <-chan struct{}
	AnonPrefixes() enforce.AddressPrefixes
}

// SnapshotPolicy adapts the snapshot holder to PolicySource.
func SnapshotPolicy(h Snapshots) PolicySource { return snapshotPolicy{h} }

type snapshotPolicy struct{ Snapshots }

func (s snapshotPolicy) Policy(version uint64, service string) (policy.Document, bool) {
	cur := s.Current()
	svc, ok := cur.Services().Service(service)
	if !ok {
		return policy.Document{}, false
	}
	d := cur.Policy(version).ForRoutes(svc.Routes)
	p := s.AnonPrefixes()
	d.AnonIPv4Prefix, d.AnonIPv6Prefix = p.IPv4, p.IPv6
	return d, true
}
