package gateway

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/services"
)

// ProxyPrefix is where the reverse proxy serves a service by path:
// /proxy/<slug>/<the service's own path>.
const ProxyPrefix = "/proxy/"

// Proxy serves the services that declare an upstream URL, for teams with
// no gateway of their own: a request to one of a service's host names (see
// ByHost), or to ProxyPrefix + slug + path, is matched against the
// service's routes, enforced by the engine's middleware like any other way
// in, and passed to the upstream by httputil.ReverseProxy. Bodies stream
// both ways (responses are flushed as they arrive); the upstream's answers,
// errors included, reach the client unchanged; an upstream that cannot be
// reached is a 502, and its request was counted once, as it was decided.
type Proxy struct {
	catalogs  Catalogs
	enforcer  Enforcer
	log       *slog.Logger
	transport http.RoundTripper
}

// NewProxy returns the reverse proxy. transport nil means a dedicated
// http.Transport with dial and header timeouts.
func NewProxy(catalogs Catalogs, enforcer Enforcer, transport http.RoundTripper, logger *slog.Logger) *Proxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if transport == nil {
		transport = &http.Transport{
			Proxy:                 nil, // the upstream is named by the operator, never by the environment
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			ForceAttemptHTTP2:     true,
		}
	}
	return &Proxy{catalogs: catalogs, enforcer: enforcer, log: logger, transport: transport}
}

// ServeHTTP serves ProxyPrefix + slug + path.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, ProxyPrefix)
	slug, path, _ := strings.Cut(rest, "/")
	svc, ok := p.catalogs.Catalog().Service(slug)
	if !ok || svc.Upstream == "" {
		writeProblem(w, http.StatusNotFound, "unknown_service",
			"No service with an upstream URL has the slug \""+slug+"\".")
		return
	}
	// The routes of a service with host names match on those names.
	host := r.Host
	if len(svc.Hosts) > 0 {
		host = svc.Hosts[0]
	}
	p.serve(w, r, svc, host, "/"+path)
}

// ServeService serves r, addressed to one of svc's host names, whole.
func (p *Proxy) ServeService(w http.ResponseWriter, r *http.Request, svc services.Service) {
	p.serve(w, r, svc, r.Host, r.URL.Path)
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, svc services.Service, host, path string) {
	target, err := url.Parse(svc.Upstream)
	if err != nil {
		// Validated when stored; a bad one is a bug, not the caller's.
		p.log.ErrorContext(r.Context(), "service upstream does not parse", "service", svc.Slug, "err", err)
		writeProblem(w, http.StatusBadGateway, "bad_upstream", "The service's upstream is misconfigured.")
		return
	}
	uri := path
	if r.URL.RawQuery != "" {
		uri += "?" + r.URL.RawQuery
	}
	route := ""
	if s, pattern, ok := p.catalogs.Catalog().Match(r.Method, host, uri); ok && s.Slug == svc.Slug {
		route = pattern
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = singleSlash(target.Path, path)
			pr.Out.URL.RawPath = ""
			pr.SetXForwarded()
		},
		Transport:     p.transport,
		FlushInterval: -1, // stream: flush every write, for server-sent events and large bodies
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.log.WarnContext(r.Context(), "upstream unreachable", "service", svc.Slug, "err", err)
			writeProblem(w, http.StatusBadGateway, "upstream_unreachable",
				"The service's upstream could not be reached.")
		},
	}
	p.enforcer.Enforce(w, r, route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Over a degrade-mode tier the engine marks the response; the
		// upstream is told too, so it serves its reduced answer. A client's
		// own Sluice-Degraded never reaches it.
		r.Header.Del(enforce.HeaderDegraded)
		if d := w.Header().Get(enforce.HeaderDegraded); d != "" {
			r.Header.Set(enforce.HeaderDegraded, d)
		}
		rp.ServeHTTP(w, r)
	}))
}

func singleSlash(base, path string) string {
	return strings.TrimSuffix(base, "/") + "/" + strings.TrimPrefix(path, "/")
}

// ByHost sends requests addressed to a host name of a service with an
// upstream URL to proxy, and everything else to next (the portal's own
// routes).
func ByHost(catalogs Catalogs, proxy *Proxy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if svc, ok := catalogs.Catalog().ForHost(r.Host); ok && svc.Upstream != "" {
			proxy.ServeService(w, r, svc)
			return
		}
		next.ServeHTTP(w, r)
	})
}
