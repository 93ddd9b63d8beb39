package services

import (
	"fmt"
	"net"
	"strings"
)

// Catalog is every declared service with one ServeMux holding all their
// routes, built once per snapshot and then read by any number of
// goroutines. Routes are unique across services (the Repo refuses a pattern
// that conflicts with another service's), so a matched pattern names exactly
// one service's route, and a plan's tier, which names a pattern, limits
// exactly one route.
type Catalog struct {
	services []Service
	bySlug   map[string]int
	byHost   map[string]int
	owner    map[string]int // pattern -> index in services
	mux      Mux
}

// NewCatalog builds the catalog of svcs. It fails when two routes
// conflict or a host is claimed twice, which the Repo never stores.
func NewCatalog(svcs []Service) (*Catalog, error) {
	c := &Catalog{
		services: svcs,
		bySlug:   make(map[string]int, len(svcs)),
		byHost:   map[string]int{},
		owner:    map[string]int{},
	}
	for i, s := range svcs {
		c.bySlug[s.Slug] = i
		for _, h := range s.Hosts {
			if j, dup := c.byHost[h]; dup {
				return nil, fmt.Errorf("host %q is claimed by services %q and %q", h, svcs[j].Slug, s.Slug)
			}
			c.byHost[h] = i
		}
		for _, p := range s.Routes {
			if err := c.mux.addStored(p); err != nil {
				return nil, fmt.Errorf("service %q route %q: %w", s.Slug, p, err)
			}
			c.owner[p] = i
		}
	}
	return c, nil
}

// Services returns every service, ordered by slug. Never modify it.
func (c *Catalog) Services() []Service { return c.services }

// Service returns the service with the given slug.
func (c *Catalog) Service(slug string) (Service, bool) {
	i, ok := c.bySlug[slug]
	if !ok {
		return Service{}, false
	}
	return c.services[i], true
}

// ForHost returns the service that declares host (a Host header value; a
// port is ignored, case too).
func (c *Catalog) ForHost(host string) (Service, bool) {
	i, ok := c.byHost[normalHost(host)]
	if !ok {
		return Service{}, false
	}
	return c.services[i], true
}

// Routes returns every declared pattern, service by service.
func (c *Catalog) Routes() []string {
	var out []string
	for _, s := range c.services {
		out = append(out, s.Routes...)
	}
	return out
}

// Match finds the route a request counts under: ServeMux's rules (most
// specific pattern wins, "{name...}" and "{$}", HEAD served by GET) on the
// path's canonical form, so that no other spelling of a route's path
// (encoded, with parameters, dot segments, repeated or trailing slashes, or
// in other letter case) escapes the route's limits: see Mux.Match. A route
// of a service that declares host names matches only requests to one of
// them; pattern is "" and ok false when nothing matches.
func (c *Catalog) Match(method, host, requestURI string) (svc Service, pattern string, ok bool) {
	p, ok := c.mux.Match(method, host, requestURI)
	if !ok {
		return Service{}, "", false
	}
	s := c.services[c.owner[p]]
	if len(s.Hosts) > 0 {
		if i, ok := c.byHost[normalHost(host)]; !ok || c.services[i].Slug != s.Slug {
			return Service{}, "", false
		}
	}
	return s, p, true
}

func normalHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}
