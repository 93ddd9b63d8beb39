package gateway

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/services"
)

// ProxyPrefix is where the reverse proxy's listener serves a service by
// path: /proxy/<slug>/<the service's own path>.
const ProxyPrefix = "/proxy/"

// Proxy serves the services that declare an upstream URL, for teams with
// no gateway of their own: a request to one of a service's host names, or
// to ProxyPrefix + slug + path on the proxy's own listener (see Listener
// and ByHost), is matched against the service's routes, enforced by the
// engine's middleware like any other way in, and passed to the upstream by
// httputil.ReverseProxy. Bodies stream both ways (responses are flushed as
// they arrive); an upstream that cannot be reached is a 502, and its
// request was counted once, as it was decided.
//
// The proxy never passes the console's credentials either way: Sluice's
// cookies and operator and service tokens are taken out of requests, an
// upstream's Set-Cookie naming one of Sluice's cookies (and its
// Clear-Site-Data) out of responses. Responses on an origin that may be
// the console's are sandboxed (see sandboxPolicy). The upstream's answers
// otherwise reach the client unchanged.
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
		// Upstreams are usually the operator's internal services: loopback
		// and private addresses are reached; link-local, cloud metadata and
		// unspecified ones never, whatever the upstream's name resolves to.
		upstreams := egress.NewDialer(egress.Options{Rules: egress.Rules{Policy: egress.Internal},
			Timeout: 5 * time.Second, KeepAlive: 30 * time.Second})
		transport = &http.Transport{
			Proxy:                 nil, // the upstream is named by the operator, never by the environment
			DialContext:           upstreams.DialContext,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			ForceAttemptHTTP2:     true,
		}
	}
	return &Proxy{catalogs: catalogs, enforcer: enforcer, log: logger, transport: transport}
}

// ServeHTTP serves ProxyPrefix + slug + path, sandboxed: every service
// served by path shares the listener's origin with the others, and its
// host name, cookies included, usually with the console.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), ProxyPrefix)
	slug, escaped, _ := strings.Cut(rest, "/")
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
	p.serve(w, r, svc, host, "/"+escaped, true)
}

// ServeService serves r, addressed to one of svc's host names, whole.
// sandbox says the host name may be the console's (on the console's own
// listener it may be); the response is sandboxed then, and also when the
// browser sent one of Sluice's cookies, which it holds only for the
// console's host name.
func (p *Proxy) ServeService(w http.ResponseWriter, r *http.Request, svc services.Service, sandbox bool) {
	p.serve(w, r, svc, r.Host, r.URL.EscapedPath(), sandbox)
}

// serve proxies r to svc's upstream. escaped is the service's own path as
// sent, percent-encoding kept, so that it is matched as sent.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, svc services.Service, host, escaped string, sandbox bool) {
	target, err := url.Parse(svc.Upstream)
	if err != nil {
		// Validated when stored; a bad one is a bug, not the caller's.
		p.log.ErrorContext(r.Context(), "service upstream does not parse", "service", svc.Slug, "err", err)
		writeProblem(w, http.StatusBadGateway, "bad_upstream", "The service's upstream is misconfigured.")
		return
	}
	sandbox = sandbox || carriesConsoleCookie(r)
	path, err := url.PathUnescape(escaped)
	if err != nil {
		path = escaped // the server parsed it; never here
	}
	uri := escaped
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
			// Dot segments and repeated slashes resolved, so the upstream
			// serves the route the request was counted under.
			pr.Out.URL.Path = singleSlash(target.Path, services.CleanPath(path))
			pr.Out.URL.RawPath = ""
			pr.SetXForwarded()
			stripConsoleCredentials(pr.Out.Header)
		},
		ModifyResponse: func(res *http.Response) error {
			stripConsoleCookies(res.Header)
			if sandbox {
				res.Header.Add("Content-Security-Policy", sandboxPolicy)
			}
			return nil
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
		r.Header.Del(httplimit.HeaderDegraded)
		if d := w.Header().Get(httplimit.HeaderDegraded); d != "" {
			r.Header.Set(httplimit.HeaderDegraded, d)
		}
		// The upstream is told who called, as a gateway tells it from a
		// check's answer; a client's own claims are replaced.
		caller, _ := httplimit.CallerFrom(r.Context())
		setIdentity(r.Header, caller)
		rp.ServeHTTP(w, r)
	}))
}

func singleSlash(base, path string) string {
	return strings.TrimSuffix(base, "/") + "/" + strings.TrimPrefix(path, "/")
}

// ByHost, on the console's own listener, sends requests addressed to a host
// name of a service with an upstream URL to proxy, sandboxed (a name that
// reaches this listener may be the console's own, misconfigured as a
// service's), and everything else to next (the portal's own routes).
func ByHost(catalogs Catalogs, proxy *Proxy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if svc, ok := catalogs.Catalog().ForHost(r.Host); ok && svc.Upstream != "" {
			proxy.ServeService(w, r, svc, true)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Listener is the reverse proxy's own listener (PORTAL_PROXY_ADDR), an
// origin apart from the console's: a request to a service's host name is
// served on that service's own origin, ProxyPrefix + slug + path
// sandboxed, anything else is 404. The console is never served here.
func Listener(catalogs Catalogs, proxy *Proxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if svc, ok := catalogs.Catalog().ForHost(r.Host); ok && svc.Upstream != "" {
			proxy.ServeService(w, r, svc, false)
			return
		}
		if strings.HasPrefix(r.URL.Path, ProxyPrefix) {
			proxy.ServeHTTP(w, r)
			return
		}
		writeProblem(w, http.StatusNotFound, "not_found",
			"This is Sluice's reverse proxy: services are served at "+ProxyPrefix+"<slug>/ or on their host names.")
	})
}
