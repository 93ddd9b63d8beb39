package httplimit_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// mwClock is a settable clock shared by a memory store and the middleware,
// so header values are exact; mwResolver a static Resolver that counts
// anonymous resolutions (storetest's, shared with the other ways in's tests).
type (
	mwClock    = storetest.Clock
	mwResolver = storetest.Resolver
)

func newMWClock(t time.Time) *mwClock { return storetest.NewClockAt(t) }

// sfItem is one member of a Structured Field list whose items are strings
// with integer parameters, the shape of RateLimit and RateLimit-Policy.
type sfItem struct {
	Name   string
	Params map[string]int64
}

// parseSFList parses an RFC 8941 list of sf-string items with integer
// parameters, strictly enough that a malformed header fails the test.
func parseSFList(t *testing.T, s string) []sfItem {
	t.Helper()
	var items []sfItem
	rest := s
	for {
		rest = strings.TrimLeft(rest, " \t")
		if !strings.HasPrefix(rest, `"`) {
			t.Fatalf("sf-list %q: item does not start with a string at %q", s, rest)
		}
		var name strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' {
				i++
			}
			name.WriteByte(rest[i])
		}
		if i >= len(rest) {
			t.Fatalf("sf-list %q: unterminated string", s)
		}
		rest = rest[i+1:]
		item := sfItem{Name: name.String(), Params: map[string]int64{}}
		for strings.HasPrefix(rest, ";") {
			rest = rest[1:]
			eq := strings.IndexByte(rest, '=')
			if eq < 1 {
				t.Fatalf("sf-list %q: parameter without value at %q", s, rest)
			}
			key := rest[:eq]
			for _, c := range key {
				if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
					t.Fatalf("sf-list %q: bad parameter key %q", s, key)
				}
			}
			rest = rest[eq+1:]
			end := strings.IndexAny(rest, ";, ")
			if end < 0 {
				end = len(rest)
			}
			v, err := strconv.ParseInt(rest[:end], 10, 64)
			if err != nil || end > 15 {
				t.Fatalf("sf-list %q: parameter %s is not an sf-integer: %q", s, key, rest[:end])
			}
			item.Params[key] = v
			rest = rest[end:]
		}
		items = append(items, item)
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return items
		}
		if !strings.HasPrefix(rest, ",") {
			t.Fatalf("sf-list %q: expected ',' at %q", s, rest)
		}
		rest = rest[1:]
	}
}
