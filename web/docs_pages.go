package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/views"
)

// docsPages serves the generated rate-limit docs. Building the model runs
// every plan's limits through the middleware to record real examples, so
// models are cached until a plan changes (the key holds every plan's id and
// version) and rebuilt on the next request after that.
type docsPages struct {
	s *Server

	mu    sync.Mutex
	cache map[string]docs.Model
}

// gatewayBase is where a service behind its own gateway is called: its
// first host name (https, as a gateway in front of an API serves it), or
// a placeholder naming the gateway when it declares none.
func gatewayBase(svc services.Service) string {
	if len(svc.Hosts) > 0 {
		return "https://" + svc.Hosts[0]
	}
	return "https://YOUR-GATEWAY"
}

// maxDocsCache bounds the cache: one entry per (plans state, viewer's plan,
// base URL); older states are dropped wholesale when it fills.
const maxDocsCache = 64

func newDocsPages(s *Server) *docsPages {
	return &docsPages{s: s, cache: map[string]docs.Model{}}
}

// model returns the docs model for r: the plans as they are now, the
// signed-in developer's plan first, examples addressed to this host. Under
// /docs/services/{slug} it documents that service's routes (the demo
// service is the sample API, with its operations' own descriptions).
func (d *docsPages) model(r *http.Request) (docs.Model, error) {
	all, err := d.s.deps.Plans.List(r.Context())
	if err != nil {
		return docs.Model{}, fmt.Errorf("docs: list plans: %w", err)
	}
	all = d.s.regionalPlans(all)
	your, err := d.s.viewerPlan(r, all)
	if err != nil {
		return docs.Model{}, err
	}
	console := d.s.publicBase(r)
	base := console
	var svc services.Service
	if slug := r.PathValue("slug"); slug != "" {
		if d.s.services == nil {
			return docs.Model{}, errUnavailable
		}
		if svc, err = d.s.services.Get(r.Context(), slug); err != nil {
			return docs.Model{}, err
		}
		// A proxied service is called through the proxy, never on the
		// console's origin: its examples are addressed there. One behind
		// its own gateway is called at its host name through that gateway
		// (the console would answer 404), or at a placeholder for it.
		if u := d.s.serviceURL(r, svc); u != "" {
			base = u
		} else if svc.Upstream == "" && svc.Slug != services.DemoSlug {
			base = gatewayBase(svc)
		}
	}
	now := docsNow(d.s.now())
	var key strings.Builder
	key.WriteString(base + "|" + console + "|" + your.Slug + "|" + now.Format(time.DateOnly))
	opts := docs.Options{BaseURL: base, StatusBaseURL: console, YourPlan: your.Slug, Now: now, Instances: d.s.deps.Instances}
	if svc.Slug != "" {
		opts.Title = svc.Name
		if svc.Slug != services.DemoSlug {
			opts.Endpoints = docs.RouteEndpoints(svc.Routes)
		}
		fmt.Fprintf(&key, "|service:%s:%d", svc.Slug, svc.Version)
	}
	for _, p := range all {
		fmt.Fprintf(&key, "|%d:%d", p.ID, p.Version)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.cache[key.String()]; ok {
		return m, nil
	}
	m, err := docs.Build(all, opts)
	if err != nil {
		return docs.Model{}, err
	}
	if len(d.cache) >= maxDocsCache {
		clear(d.cache)
	}
	d.cache[key.String()] = m
	return m, nil
}

// docsNow is the moment the docs' examples are computed at: the start of
// the next day (UTC), so every example reset date they show is in the
// future for as long as a model is cached (the cache key holds the day).
func docsNow(now time.Time) time.Time {
	return now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
}

// viewerPlan is the plan of the signed-in developer: their own, else the
// default plan. Visitors and operators have none (the zero Plan).
func (s *Server) viewerPlan(r *http.Request, all []plans.Plan) (plans.Plan, error) {
	u, ok := s.currentUser(r)
	if !ok || u.Role != "developer" {
		return plans.Plan{}, nil
	}
	for _, p := range all {
		if (u.PlanID != nil && p.ID == *u.PlanID) || (u.PlanID == nil && p.IsDefault) {
			return p, nil
		}
	}
	return plans.Plan{}, nil
}

func (d *docsPages) page(w http.ResponseWriter, r *http.Request) {
	m, err := d.model(r)
	if err != nil {
		d.s.error(w, r, err)
		return
	}
	title := "Rate limits"
	if r.PathValue("slug") != "" {
		title += ": " + m.Title
	}
	d.s.render(w, r, http.StatusOK, views.DocsPage(d.s.page(r, title, "docs"), m))
}

func (d *docsPages) markdown(w http.ResponseWriter, r *http.Request) {
	m, err := d.model(r)
	if err != nil {
		d.s.error(w, r, err)
		return
	}
	body := docs.Markdown(m)
	h := w.Header()
	h.Set("Content-Type", "text/markdown; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-cache")
	h.Add("Vary", "Cookie")
	_, _ = w.Write([]byte(body))
}

func (d *docsPages) openAPI(w http.ResponseWriter, r *http.Request) {
	m, err := d.model(r)
	if err != nil {
		d.s.error(w, r, err)
		return
	}
	body, err := docs.OpenAPI(m)
	if err != nil {
		d.s.error(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-cache")
	h.Add("Vary", "Cookie")
	_, _ = w.Write(body)
}

// publicBase is the scheme and host the browser used, for examples people
// copy (curl commands, the OpenAPI servers list).
func (s *Server) publicBase(r *http.Request) string {
	if s.secureRequest(r) {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}
