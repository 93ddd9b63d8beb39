package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// maxKeyLength bounds a presented API key; anything longer is rejected before
// it reaches the resolver, so a huge header costs no hashing.
const maxKeyLength = 256

// ParseTrustedProxies parses a comma-separated list of CIDR prefixes or bare
// addresses (a bare address trusts exactly that host), as given in
// PORTAL_TRUSTED_PROXIES, e.g. "10.0.0.0/8, 192.168.1.7, fd00::/8". An empty
// string trusts no proxy. The error names the entry that does not parse.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var prefixes []netip.Prefix
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		if strings.Contains(field, "/") {
			p, err := netip.ParsePrefix(field)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %w", field, err)
			}
			prefixes = append(prefixes, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(field)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", field, err)
		}
		a = a.Unmap()
		prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
	}
	return prefixes, nil
}

// ClientIP returns the address of the client that sent r.
//
// X-Forwarded-For is honoured only when the immediate peer (r.RemoteAddr) is a
// trusted proxy: its entries are read from the right, trusted proxies are
// skipped, and the first untrusted address is the client. Entries further left
// were written by the client itself and could be anything, so they are never
// believed. An entry that does not parse stops the walk, and the nearest
// address already established (the last trusted hop) is returned instead, so
// garbage cannot choose the subject. The zero Addr is returned only when
// r.RemoteAddr itself does not parse.
func ClientIP(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer, ok := parseHostAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}
	}
	if !isTrusted(peer, trusted) {
		return peer
	}
	client := peer
	values := r.Header.Values("X-Forwarded-For")
	// Several X-Forwarded-For lines form one list in order; walk the last
	// line first, each line from its right end.
	for i := len(values) - 1; i >= 0; i-- {
		line := values[i]
		for line != "" {
			var entry string
			if comma := strings.LastIndexByte(line, ','); comma >= 0 {
				entry, line = line[comma+1:], line[:comma]
			} else {
				entry, line = line, ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			a, ok := parseHostAddr(entry)
			if !ok {
				return client
			}
			client = a
			if !isTrusted(a, trusted) {
				return a
			}
		}
	}
	// Every hop was trusted: the request came from inside the trusted
	// network, and the leftmost hop is the best name for its origin.
	return client
}

// parseHostAddr parses "addr", "addr:port" or "[v6]:port", unmapping
// IPv4-in-IPv6 so that one client has one subject whichever way it arrived.
// Zones are dropped for the same reason.
func parseHostAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// presentedKey returns the API key a request presents, from
// "Authorization: Bearer <key>" or, failing that, "X-API-Key: <key>".
// presented reports whether the request tried to present credentials at all:
// a request that did but whose key is unusable (another auth scheme, an empty
// or oversized token, inner whitespace) gets secret "" and presented true, and
// is answered 401 rather than treated as anonymous.
func presentedKey(r *http.Request) (secret string, presented bool) {
	// Indexed by its canonical form: Header.Values would canonicalise
	// "X-API-Key" into a new string on every request.
	return credentialKey(r.Header.Get("Authorization"), r.Header["X-Api-Key"])
}

// credentialKey is presentedKey over an Authorization value and the
// X-API-Key values presented.
func credentialKey(auth string, apiKeys []string) (secret string, presented bool) {
	if auth != "" {
		scheme, token, ok := strings.Cut(strings.TrimSpace(auth), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", true
		}
		return usableKey(strings.TrimSpace(token)), true
	}
	if len(apiKeys) > 0 {
		if len(apiKeys) > 1 {
			return "", true
		}
		return usableKey(strings.TrimSpace(apiKeys[0])), true
	}
	return "", false
}

// usableKey returns key when it is shaped like a key, else "".
func usableKey(key string) string {
	if key == "" || len(key) > maxKeyLength {
		return ""
	}
	for i := 0; i < len(key); i++ {
		// Keys are printable ASCII without spaces; anything else is a paste
		// error or an attack, never a key.
		if key[i] <= ' ' || key[i] > '~' {
			return ""
		}
	}
	return key
}
