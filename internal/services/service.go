// Package services holds what Sluice protects, as data: services (an API an
// operator declares: a name, a slug, optional host names and an optional
// upstream URL) and each service's routes, net/http ServeMux patterns such as
// "GET /items/{id}". A plan's tier names one of these routes. Requests that
// arrive through a gateway are matched to a route by the same ServeMux rules
// the embedded middleware gets from net/http (see Catalog).
package services

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/plans"
)

// Errors returned (wrapped) by the Repo. Validation problems are reported as
// *plans.ValidationError, the type every form and API decoder already shows.
var (
	// ErrNotFound means no service has the given id or slug.
	ErrNotFound = errors.New("service not found")
	// ErrConflict means the version the caller read is stale.
	ErrConflict = errors.New("service was changed by someone else")
	// ErrSlugTaken means another service already uses the slug.
	ErrSlugTaken = errors.New("service slug already taken")
	// ErrRouteInUse means a route that a plan's tier names would be removed.
	ErrRouteInUse = errors.New("route is named by a plan's tier")
)

// Bounds enforced by Validate; the schema's CHECK constraints agree.
const (
	MaxNameLen     = 100
	MaxHosts       = 20
	MaxRoutes      = 200
	MaxPatternLen  = 200
	MaxUpstreamLen = 2000
	maxHostLen     = 253
	// DemoSlug is the service the sample API is declared as.
	DemoSlug = "demo"
)

var (
	slugPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	hostPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
)

// Service is a declared API.
type Service struct {
	ID   int64  `json:"id"`
	Slug string `json:"slug"`
	Name string `json:"name"`
	// Hosts are the host names the service answers to, lowercase, without
	// a port. A request whose host is one of them is matched against this
	// service's routes first.
	Hosts []string `json:"hosts"`
	// Upstream is where the portal's reverse proxy sends the service's
	// requests; "" when the service sits behind its own gateway.
	Upstream  string    `json:"upstream_url"`
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Routes are ServeMux patterns, in their display order.
	Routes []string `json:"routes"`
}

// Input is what an operator submits to create or replace a service.
type Input struct {
	Slug     string   `json:"slug"`
	Name     string   `json:"name"`
	Hosts    []string `json:"hosts"`
	Upstream string   `json:"upstream_url"`
	Routes   []string `json:"routes"`
}

func (in Input) normalized() Input {
	in.Slug = strings.TrimSpace(in.Slug)
	in.Name = strings.TrimSpace(in.Name)
	in.Upstream = strings.TrimSpace(in.Upstream)
	hosts := make([]string, 0, len(in.Hosts))
	for _, h := range in.Hosts {
		hosts = append(hosts, strings.ToLower(strings.TrimSpace(h)))
	}
	in.Hosts = hosts
	routes := make([]string, 0, len(in.Routes))
	for _, r := range in.Routes {
		routes = append(routes, strings.TrimSpace(r))
	}
	in.Routes = routes
	return in
}

// Validate checks in on its own: every field, and that its route patterns
// parse and do not conflict with each other (as net/http's ServeMux
// decides). Conflicts with other services' routes are checked by the Repo,
// which sees them all. It returns a *plans.ValidationError naming every
// invalid field, or nil.
func Validate(in Input) error {
	var errs []plans.FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, plans.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if !slugPattern.MatchString(in.Slug) {
		add("slug", "must be 1 to 63 lowercase letters, digits or dashes, starting with a letter or digit")
	}
	if n := utf8.RuneCountInString(in.Name); n < 1 || n > MaxNameLen {
		add("name", "must be 1 to %d characters", MaxNameLen)
	}
	if len(in.Hosts) > MaxHosts {
		add("hosts", "at most %d host names", MaxHosts)
	}
	seenHosts := map[string]int{}
	for i, h := range in.Hosts {
		field := fmt.Sprintf("hosts[%d]", i)
		if len(h) > maxHostLen || !hostPattern.MatchString(h) {
			add(field, "%q is not a host name: letters, digits, dashes and dots, without a port or scheme", h)
			continue
		}
		if j, dup := seenHosts[h]; dup {
			add(field, "duplicates hosts[%d]", j)
		}
		seenHosts[h] = i
	}
	if in.Upstream != "" {
		if msg := upstreamProblem(in.Upstream); msg != "" {
			add("upstream_url", "%s", msg)
		}
	}
	if len(in.Routes) > MaxRoutes {
		add("routes", "at most %d routes", MaxRoutes)
	}
	var m Mux
	for i, p := range in.Routes {
		if err := m.Add(p); err != nil {
			add(fmt.Sprintf("routes[%d]", i), "%s", err.Error())
		}
	}
	if len(errs) > 0 {
		return &plans.ValidationError{Fields: errs}
	}
	return nil
}

func upstreamProblem(s string) string {
	if len(s) > MaxUpstreamLen {
		return fmt.Sprintf("must be at most %d characters", MaxUpstreamLen)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "must be an absolute http or https URL, e.g. http://10.0.0.5:8080"
	}
	if u.User != nil {
		return "must not carry credentials"
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "must not have a query or fragment"
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil && strings.Contains(u.Host, ":") && !strings.HasPrefix(u.Host, "[") {
		return "has a malformed host:port"
	}
	return ""
}
