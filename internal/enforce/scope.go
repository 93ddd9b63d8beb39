package enforce

import (
	"net/netip"
	"strings"
)

// Scope narrows what a key may be used for (issue 37, item 4). A zero
// Scope permits everything; each non-empty part must hold:
//
//   - Routes: the request's route is one of these patterns, each a route
//     as tiers name them ("GET /api/items/{id}", or "/api/items/{id}" for
//     any method);
//   - CIDRs: the client address is in one of these ranges;
//   - ReadOnly: the method is GET, HEAD or OPTIONS.
//
// A request outside its key's scope is refused (403) before any limit is
// consulted, so it consumes no budget.
type Scope struct {
	Routes   []string
	CIDRs    []netip.Prefix
	ReadOnly bool
}

// Unrestricted reports whether the scope permits every request.
func (s *Scope) Unrestricted() bool {
	return s == nil || (len(s.Routes) == 0 && len(s.CIDRs) == 0 && !s.ReadOnly)
}

// Permits reports whether a request with this method, matched route
// pattern and client address is within the scope; when it is not, the
// reason names the part of the scope that refused it, for the 403's
// body. route is the pattern the request matched ("GET /api/items/{id}"
// or "/api/items/{id}"); "" when it matched none, which no route list
// permits.
func (s *Scope) Permits(method, route string, addr netip.Addr) (reason string, ok bool) {
	if s.Unrestricted() {
		return "", true
	}
	if s.ReadOnly && method != "GET" && method != "HEAD" && method != "OPTIONS" {
		return "this key is read-only: it may send GET, HEAD and OPTIONS requests only", false
	}
	if len(s.Routes) > 0 && !routePermitted(s.Routes, method, route) {
		return "this key may call only its allowed routes: " + strings.Join(s.Routes, ", "), false
	}
	if len(s.CIDRs) > 0 && !addrPermitted(s.CIDRs, addr) {
		return "this key may be used only from its allowed address ranges", false
	}
	return "", true
}

// routePermitted matches a request against a scope's route list: an entry
// with a method ("GET /x") permits that method on /x, one without ("/x")
// every method on /x.
func routePermitted(allowed []string, method, route string) bool {
	if route == "" {
		return false
	}
	routeMethod, routePath := SplitRoute(route)
	if routeMethod != "" {
		method = routeMethod
	}
	for _, a := range allowed {
		m, p := SplitRoute(a)
		if p == routePath && (m == "" || m == method) {
			return true
		}
	}
	return false
}

func addrPermitted(allowed []netip.Prefix, addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range allowed {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// SplitRoute splits a route pattern into its method ("" for none) and
// the rest: "GET /api/items/{id}" is "GET" and "/api/items/{id}".
func SplitRoute(route string) (method, path string) {
	route = strings.TrimSpace(route)
	if m, p, ok := strings.Cut(route, " "); ok && !strings.HasPrefix(m, "/") {
		return m, strings.TrimSpace(p)
	}
	return "", route
}
