package services

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// Mux is a set of route patterns checked by net/http's own ServeMux, so
// that a pattern is accepted and refused exactly as Go's standard router
// would, and matched on a request's canonical path (see Match), so that no
// spelling of a path escapes the route it names. The zero value is empty and
// ready to use; a Mux is not safe for concurrent Add, but Match may run
// concurrently once adding is done.
type Mux struct {
	// exact holds the patterns as declared: it refuses what ServeMux
	// refuses, in ServeMux's words.
	exact *http.ServeMux
	// folded holds each pattern with its host and path in lower case;
	// Match routes through it.
	folded *http.ServeMux
	// original maps a folded pattern to the pattern as declared, and
	// literals to its count of literal host and path segments.
	original map[string]string
	literals map[string]int
	// slashed is set when a pattern's path ends in "/" (a subtree or
	// "{$}"): only then can adding a trailing slash reach another route.
	slashed bool
	n       int
}

// Add registers pattern. A pattern that does not parse, that has no
// method (a route names what a tier limits: "GET /x", not "/x"), that
// conflicts with one already added (ServeMux.Handle panics on both), or that
// conflicts with one once letter case is ignored ("GET /Items" beside "GET
// /items": paths are matched case-insensitively) is refused with the reason.
func (m *Mux) Add(pattern string) error { return m.add(pattern, true) }

// addStored registers a pattern already stored: one that conflicts with
// another only once case is ignored (stored before paths were matched
// case-insensitively) is kept, but its requests match the first of the two.
func (m *Mux) addStored(pattern string) error { return m.add(pattern, false) }

func (m *Mux) add(pattern string, strict bool) error {
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
	if m.exact == nil {
		m.exact, m.folded = http.NewServeMux(), http.NewServeMux()
		m.original, m.literals = map[string]string{}, map[string]int{}
	}
	if err := register(m.exact, pattern); err != nil {
		return err
	}
	m.n++
	folded := foldPattern(pattern)
	if err := register(m.folded, folded); err != nil {
		if !strict {
			return nil
		}
		other := "another route"
		for f, o := range m.original {
			if strings.Contains(err.Error(), `"`+f+`"`) {
				other = fmt.Sprintf("%q", o)
				break
			}
		}
		return fmt.Errorf("matches the same requests as %s once letter case is ignored (paths are matched case-insensitively)", other)
	}
	m.original[folded] = pattern
	m.literals[folded] = literalSegments(folded)
	m.slashed = m.slashed || strings.HasSuffix(pattern, "/") || strings.HasSuffix(pattern, "/{$}")
	return nil
}

// register adds pattern to mux, turning ServeMux's panic over a bad or
// conflicting pattern into an error naming the reason and the other pattern.
func register(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errors.New(strings.TrimPrefix(fmt.Sprint(p), "http: "))
		}
	}()
	mux.Handle(pattern, route(pattern))
	return nil
}

// Len is how many patterns the Mux holds.
func (m *Mux) Len() int { return m.n }

// Match returns the declared pattern a request with this method, host and
// request URI (path and query, e.g. "/items/7?x=1") counts under. The path
// is matched in its canonical form, so that every spelling a server may
// route to the same handler counts under the same route:
//
//   - percent-encoding is decoded once ("/api/%73earch" is "/api/search");
//     an encoded slash stays inside its segment, as ServeMux keeps it, and
//     the path is also tried with it decoded ("/api%2Fsearch"), as some
//     servers decode it before routing;
//   - path parameters are dropped ("/api/search;x=1"), a backslash is a
//     slash, and dot segments and repeated slashes are resolved as
//     ServeMux's redirect would ("/api//search", "/x/../api/search");
//   - letter case is ignored ("/API/search"), since many servers route
//     case-insensitively;
//   - a trailing slash is optional both ways ("/api/search/" counts under
//     "GET /api/search", "/docs" under "GET /docs/").
//
// Where these readings match different patterns, the pattern with the most
// literal segments wins ("/items/new/" counts under "GET /items/new", not
// "GET /items/{rest...}"), the first reading on a tie. Each reading is
// routed as ServeMux routes (most specific wins, "{name...}" and "{$}",
// HEAD served by GET). ok is false when no pattern matches or the URI does
// not parse.
func (m *Mux) Match(method, host, requestURI string) (pattern string, ok bool) {
	if m.folded == nil || requestURI == "" || requestURI[0] != '/' {
		return "", false
	}
	u, err := url.ParseRequestURI(requestURI)
	if err != nil {
		return "", false
	}
	host = strings.ToLower(host)
	esc := u.EscapedPath()
	best, literals := m.bestOf(method, host, canonicalize(esc, false), "", -1)
	if strings.Contains(esc, "%") {
		if lower := strings.ToLower(esc); strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") {
			best, literals = m.bestOf(method, host, canonicalize(esc, true), best, literals)
		}
	}
	if best == "" {
		return "", false
	}
	return m.original[best], true
}

// bestOf routes p, and p with its trailing slash removed or added, and
// returns the folded pattern with the most literal segments among them and
// best (with its count), the earlier on a tie. The other slash is tried
// only where it could matter: when p matched nothing or a pattern with a
// wildcard, and for an added slash only when some pattern ends in one (a
// path with a trailing slash matches no other pattern but "{name...}" ones,
// which match the path without it as well).
func (m *Mux) bestOf(method, host string, p canonical, best string, literals int) (string, int) {
	f, ok := m.route(method, host, p)
	if ok && m.literals[f] > literals {
		best, literals = f, m.literals[f]
	}
	if ok && !strings.Contains(f, "{") {
		return best, literals
	}
	if !m.slashed && !strings.HasSuffix(p.path, "/") {
		return best, literals
	}
	if o := p.otherSlash(); o != p {
		if f, ok := m.route(method, host, o); ok && m.literals[f] > literals {
			best, literals = f, m.literals[f]
		}
	}
	return best, literals
}

// route is the folded pattern the folded mux routes a canonical path to.
func (m *Mux) route(method, host string, p canonical) (string, bool) {
	u := url.URL{Path: p.path, RawPath: p.raw}
	r := http.Request{Method: method, Host: host, URL: &u}
	// A handler that is not one of the registered routes is the mux's own
	// redirect or not-found handler.
	h, _ := m.folded.Handler(&r)
	pat, ok := h.(route)
	return string(pat), ok
}

// canonical is a path in canonical form: path decoded, raw its escaped
// form (which keeps an encoded slash inside its segment).
type canonical struct{ path, raw string }

// otherSlash is the path with its trailing slash removed, or added; the
// root stays the root.
func (c canonical) otherSlash() canonical {
	switch {
	case c.path == "/":
		return c
	case strings.HasSuffix(c.path, "/"):
		return canonical{strings.TrimSuffix(c.path, "/"), strings.TrimSuffix(c.raw, "/")}
	}
	return canonical{c.path + "/", c.raw + "/"}
}

// canonicalize turns an escaped path into canonical form, in lower case:
// each segment's parameters (";x=1") dropped, then the segment decoded
// (kept as sent when it does not decode), backslashes taken as slashes,
// "." and ".." segments and empty segments resolved, a trailing slash
// kept. With splitEncoded, an encoded slash or backslash splits its
// segment too.
func canonicalize(escaped string, splitEncoded bool) canonical {
	if isCanonical(escaped) {
		return canonical{escaped, escaped}
	}
	return canonicalizeSlow(escaped, splitEncoded)
}

// canonicalizeSlow is canonicalize for a path that is not already
// canonical.
func canonicalizeSlow(escaped string, splitEncoded bool) canonical {
	escaped = strings.ReplaceAll(escaped, `\`, "/")
	var segs []string
	for _, seg := range strings.Split(escaped, "/") {
		seg, _, _ = strings.Cut(seg, ";")
		if dec, err := url.PathUnescape(seg); err == nil {
			seg = dec
		}
		seg = strings.ToLower(seg)
		parts := []string{seg}
		if splitEncoded {
			parts = strings.FieldsFunc(seg, func(r rune) bool { return r == '/' || r == '\\' })
		}
		for _, p := range parts {
			switch p {
			case "", ".":
			case "..":
				if len(segs) > 0 {
					segs = segs[:len(segs)-1]
				}
			default:
				segs = append(segs, p)
			}
		}
	}
	if len(segs) == 0 {
		return canonical{"/", "/"}
	}
	raw := make([]string, len(segs))
	for i, s := range segs {
		raw[i] = url.PathEscape(s)
	}
	c := canonical{"/" + strings.Join(segs, "/"), "/" + strings.Join(raw, "/")}
	if strings.HasSuffix(escaped, "/") {
		c.path, c.raw = c.path+"/", c.raw+"/"
	}
	return c
}

// isCanonical reports whether canonicalize would return escaped as it is:
// no letter in upper case, nothing encoded, no parameters, backslashes, dot
// segments or repeated slashes. Most paths are; they cost no allocation.
func isCanonical(escaped string) bool {
	for i := 0; i < len(escaped); i++ {
		switch c := escaped[i]; {
		case c >= 'A' && c <= 'Z', c == '%', c == ';', c == '\\', c >= 0x80:
			return false
		case c == '/' && i+1 < len(escaped) && escaped[i+1] == '/':
			return false
		case c == '.' && i > 0 && escaped[i-1] == '/' && (i+1 == len(escaped) || escaped[i+1] == '/' ||
			escaped[i+1] == '.' && (i+2 == len(escaped) || escaped[i+2] == '/')):
			return false
		}
	}
	return escaped != "" && escaped[0] == '/'
}

// CleanPath resolves "." and ".." segments and repeated slashes as
// net/http's ServeMux does before it routes (it redirects the client to the
// clean path): a trailing slash is kept, and the result starts with "/".
func CleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// foldPattern lowers the host and the literal path segments of a "METHOD
// [HOST]/PATH" pattern; the method keeps its case (methods are
// case-sensitive), and so do wildcard names ("{ID}" and "{id}" stay two).
func foldPattern(pattern string) string {
	method, rest, _ := strings.Cut(pattern, " ")
	segs := strings.Split(rest, "/")
	for i, seg := range segs {
		if !strings.HasPrefix(seg, "{") {
			segs[i] = strings.ToLower(seg)
		}
	}
	return method + " " + strings.Join(segs, "/")
}

// literalSegments counts a pattern's literal path segments, and its host,
// which make it more specific than a pattern with wildcards in their place.
func literalSegments(pattern string) int {
	_, rest, _ := strings.Cut(pattern, " ")
	rest = strings.TrimSpace(rest)
	n := 0
	if i := strings.IndexByte(rest, '/'); i > 0 {
		n, rest = 1, rest[i:]
	}
	for _, seg := range strings.Split(rest, "/") {
		if seg != "" && !strings.HasPrefix(seg, "{") {
			n++
		}
	}
	return n
}

// route is the handler each pattern is registered with: it names its own
// pattern, and never serves.
type route string

func (route) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "services.Mux only matches", http.StatusInternalServerError)
}
