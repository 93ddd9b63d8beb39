package adminapi

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
)

// layerUsage is one limit's live state for a key.
type layerUsage struct {
	// Policy is the name clients see in RateLimit-Policy ("pro-search").
	Policy        string `json:"policy"`
	Algorithm     string `json:"algorithm"`
	Route         string `json:"route"`
	Limit         int64  `json:"limit"`
	WindowSeconds int64  `json:"window_seconds"`
	Remaining     int64  `json:"remaining"`
	// Allowed says whether a request costing the limit's cost would be
	// admitted now.
	Allowed           bool    `json:"allowed"`
	ResetAfterSeconds float64 `json:"reset_after_seconds"`
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
}

// routeUsage is what a request to one route would meet: the plan-wide
// limits and the route's own tiers.
type routeUsage struct {
	Route   string       `json:"route"`
	Allowed bool         `json:"allowed"`
	Limits  []layerUsage `json:"limits"`
}

type keyUsage struct {
	KeyID int64 `json:"key_id"`
	// Subject is the developer's ("dev:<user id>"), shared by all their
	// keys and their plan-wide limits; Key ("key:<id>") scopes the key's
	// own tiers and overrides inside it.
	Subject string       `json:"subject"`
	Key     string       `json:"key"`
	Plan    string       `json:"plan"`
	State   string       `json:"state"`
	Routes  []routeUsage `json:"routes"`
}

// keyUsage reports a key's live counters per route of the protected API,
// through the engine's Peek, which consumes nothing.
func (a *api) keyUsage(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	k, err := a.keys.Get(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	limits, err := a.keyLimits(r, k)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := keyUsage{
		KeyID: k.ID, Subject: enforce.DeveloperSubject(k.UserID), Key: enforce.KeyScope(k.ID), Plan: k.PlanSlug, State: k.State(a.now()),
		Routes: []routeUsage{},
	}
	for _, route := range a.plans.Routes() {
		var applicable []enforce.Limit
		for _, l := range limits {
			if l.Route == "" || l.Route == route {
				applicable = append(applicable, l)
			}
		}
		ru := routeUsage{Route: route, Allowed: true, Limits: []layerUsage{}}
		if len(applicable) > 0 {
			d, err := a.store.Peek(r.Context(), enforce.Request{Subject: out.Subject, Key: out.Key, Route: route, Limits: applicable})
			if err != nil {
				a.fail(w, r, err)
				return
			}
			ru.Allowed = d.Allowed
			for _, l := range d.Layers {
				ru.Limits = append(ru.Limits, layerUsage{
					Policy: l.Limit.Name, Algorithm: string(l.Limit.Algorithm), Route: l.Limit.Route,
					Limit: l.Limit.Limit, WindowSeconds: int64(l.Limit.Window / time.Second),
					Remaining: l.Remaining, Allowed: l.Allowed,
					ResetAfterSeconds: l.ResetAfter.Seconds(), RetryAfterSeconds: l.RetryAfter.Seconds(),
				})
			}
		}
		out.Routes = append(out.Routes, ru)
	}
	writeJSON(w, http.StatusOK, out)
}

// keyLimits are the engine limits that apply to k: the plan k.PlanSlug
// names (the key's own, else its owner's, else the default) with the key's
// overrides, by the snapshot's rule, read from Postgres so a change shows at
// once and revoked keys, which the snapshot drops, still answer.
func (a *api) keyLimits(r *http.Request, k apikeys.Key) ([]enforce.Limit, error) {
	return a.plans.KeyLimits(r.Context(), k.PlanSlug, k.Overrides)
}
