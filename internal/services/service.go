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
	"net/http"
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

// Mux is a set of route patterns checked and matched by net/http's own
// ServeMux, so that a pattern is accepted, refused and matched exactly as
// Go's standard router would. The zero value is empty and ready to use; a
// Mux is not safe for concurrent Add, but Match may run concurrently once
// adding is done.
type Mux struct {
	mux *http.ServeMux
	n   int
}

// Add registers pattern. A pattern that does not parse, that has no
// method (a route names what a tier limits: "GET /x", not "/x"), or that
// conflicts with one already added (ServeMux.Handle panics on both) is
// refused with the reason.
func (m *Mux) Add(pattern string) (err error) {
	if pattern == "" {
		return errors.New("must not be empty")
	}
	if len(pattern) > MaxPatternLen {
		return fmt.Errorf("must be at most %d characters", MaxPatternLen)
	}
	method, _, found := strings.Cut(pattern, " ")
	if !found || method == "" || strings.HasPrefix(method, "/") {
		return fmt.Errorf("%q needs a method, e.g. \"GET %s\"", pattern, pattern)
	}
	if m.mux == nil {
		m.mux = http.NewServeMux()
	}
	defer func() {
		if p := recover(); p != nil {
			// ServeMux reports bad and conflicting patterns by panicking;
			// its message names the reason and the other pattern.
			err = fmt.Errorf("%v", p)
			err = errors.New(strings.TrimPrefix(err.Error(), "http: "))
		}
	}()
	m.mux.Handle(pattern, route(pattern))
	m.n++
	return nil
}

// Len is how many patterns the Mux holds.
func (m *Mux) Len() int { return m.n }

// Match returns the pattern a request with this method, host and request
// URI (path and query, e.g. "/items/7?x=1") is routed to, as
// http.Request.Pattern would name it in a handler of a ServeMux holding the
// same patterns. ok is false when no pattern matches, when the URI does not
// parse, and when the ServeMux would answer with a redirect (a missing
// trailing slash, an unclean path): the client is then sent elsewhere and
// no route of the service runs.
func (m *Mux) Match(method, host, requestURI string) (pattern string, ok bool) {
	if m.mux == nil || requestURI == "" || requestURI[0] != '/' {
		return "", false
	}
	u, err := url.ParseRequestURI(requestURI)
	if err != nil {
		return "", false
	}
	r := &http.Request{Method: method, Host: host, URL: u, Header: http.Header{}}
	// A handler that is not one of the registered routes is the mux's own
	// redirect or not-found handler.
	h, _ := m.mux.Handler(r)
	p, ok := h.(route)
	return string(p), ok
}

// route is the handler each pattern is registered with: it names its own
// pattern, and never serves.
type route string

func (route) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "services.Mux only matches", http.StatusInternalServerError)
}
