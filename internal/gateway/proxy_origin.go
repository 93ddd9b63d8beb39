package gateway

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/internal/services"
)

// sandboxPolicy is the Content-Security-Policy of a proxied response on an
// origin that may be the console's, or shares its host name: the page gets
// an opaque origin and runs no script, submits no form and opens nothing,
// so it can neither read the origin's cookies nor act with them. APIs are
// unaffected (browsers apply it to documents); an HTML application is
// served whole on a host name of its own on the proxy's listener.
const sandboxPolicy = "sandbox"

// consoleTokenPrefixes start the console's own bearer credentials
// (operator tokens and service tokens), which are never an upstream's
// business.
var consoleTokenPrefixes = []string{"sluice_op_", services.TokenPrefix}

// isConsoleCookie reports whether a cookie name is one of Sluice's own:
// sluice_*, with or without a __Host- or __Secure- prefix, in any case.
func isConsoleCookie(name string) bool {
	n := strings.ToLower(name)
	n = strings.TrimPrefix(n, "__host-")
	n = strings.TrimPrefix(n, "__secure-")
	return strings.HasPrefix(n, "sluice_")
}

// carriesConsoleCookie reports whether the browser sent one of Sluice's
// cookies: it holds them only for the console's host name, so this request
// is addressed to that name.
func carriesConsoleCookie(r *http.Request) bool {
	for _, c := range r.Cookies() {
		if isConsoleCookie(c.Name) {
			return true
		}
	}
	return false
}

// stripConsoleCredentials takes Sluice's cookies and the console's bearer
// tokens out of a request on its way to an upstream. The caller's API key
// stays: it is how the upstream-facing contract names the caller.
func stripConsoleCredentials(h http.Header) {
	if lines := h.Values("Cookie"); len(lines) > 0 {
		var kept []string
		for _, line := range lines {
			for _, part := range strings.Split(line, ";") {
				name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
				if name != "" && !isConsoleCookie(name) {
					kept = append(kept, strings.TrimSpace(part))
				}
			}
		}
		h.Del("Cookie")
		if len(kept) > 0 {
			h.Set("Cookie", strings.Join(kept, "; "))
		}
	}
	for _, name := range []string{"Authorization", "X-API-Key"} {
		v := h.Get(name)
		_, token, _ := strings.Cut(v, " ")
		for _, p := range consoleTokenPrefixes {
			if strings.HasPrefix(strings.TrimSpace(token), p) || strings.HasPrefix(strings.TrimSpace(v), p) {
				h.Del(name)
			}
		}
	}
}

// stripConsoleCookies takes out of an upstream's response every Set-Cookie
// naming one of Sluice's cookies, and Clear-Site-Data, which would sign the
// browser out of the console (it clears the whole site's cookies). Other
// cookies stay: the console reads only its own names, and they are the
// upstream's own session.
func stripConsoleCookies(h http.Header) {
	if lines := h.Values("Set-Cookie"); len(lines) > 0 {
		var kept []string
		for _, line := range lines {
			name, _, _ := strings.Cut(line, "=")
			if !isConsoleCookie(strings.TrimSpace(name)) {
				kept = append(kept, line)
			}
		}
		h["Set-Cookie"] = kept
		if len(kept) == 0 {
			h.Del("Set-Cookie")
		}
	}
	h.Del("Clear-Site-Data")
}

// ProxyOrigin is where the reverse proxy is reached from outside: its own
// listener (PORTAL_PROXY_ADDR), and the services' host names.
type ProxyOrigin struct {
	// URL is the listener's public base URL (PORTAL_PROXY_URL, e.g.
	// "https://api.example.com"), "" to derive one from the console's
	// request: its host name, the listener's port, plain HTTP.
	URL string
	// Port is the listener's port; "" when there is no listener.
	Port string
}

// Base is the public base URL of the proxy's listener as seen by the
// client of r (a request to the console), without a trailing slash; "" when
// the proxy has no listener.
func (o ProxyOrigin) Base(r *http.Request) string {
	if o.Port == "" {
		return ""
	}
	if o.URL != "" {
		return strings.TrimSuffix(o.URL, "/")
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return "http://" + net.JoinHostPort(strings.Trim(host, "[]"), o.Port)
}

// ServiceURL is the base URL a proxied service's paths are called under,
// as the client of r (a request to the console, reached at consoleBase,
// e.g. "https://sluice.example.com") would call them: its first host name,
// on the proxy's listener's scheme and port (on the console's when the
// proxy has no listener of its own), or else the listener's ProxyPrefix +
// slug. "" when the service has no upstream, or no host name and the
// proxy no listener: it is then reachable nowhere.
func (o ProxyOrigin) ServiceURL(r *http.Request, consoleBase string, svc services.Service) string {
	if svc.Upstream == "" {
		return ""
	}
	base := o.Base(r)
	if len(svc.Hosts) > 0 {
		on := base
		if on == "" {
			on = consoleBase
		}
		u, err := url.Parse(on)
		if err != nil {
			return ""
		}
		if port := u.Port(); port != "" {
			u.Host = net.JoinHostPort(svc.Hosts[0], port)
		} else {
			u.Host = svc.Hosts[0]
		}
		return u.Scheme + "://" + u.Host
	}
	if base == "" {
		return ""
	}
	return base + ProxyPrefix + svc.Slug
}

// ConsoleProxyPath answers ProxyPrefix on the console's listener, which
// never serves an upstream's content: a permanent redirect (308, method and
// body kept) to the same path on the proxy's listener, or, without one, 404
// saying where proxied services are served.
func (o ProxyOrigin) ConsoleProxyPath() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := o.Base(r)
		if base == "" {
			writeProblem(w, http.StatusNotFound, "proxy_not_here",
				"The reverse proxy is not served on the console's address: services with an upstream are served on their host names, or at "+
					ProxyPrefix+"<slug>/ on the proxy's own listener (PORTAL_PROXY_ADDR).")
			return
		}
		http.Redirect(w, r, base+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}
