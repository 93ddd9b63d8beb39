package enforce_test

import (
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
)

func TestScopePermits(t *testing.T) {
	inside, outside := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("192.0.2.1")
	s := &enforce.Scope{Routes: []string{"GET /a/{id}", "/b"}, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, tc := range []struct {
		scope         *enforce.Scope
		method, route string
		addr          netip.Addr
		want          bool
	}{
		{nil, "DELETE", "", outside, true},
		{&enforce.Scope{}, "POST", "POST /x", outside, true},
		{s, "GET", "GET /a/{id}", inside, true},
		{s, "POST", "POST /a/{id}", inside, false},
		{s, "POST", "/b", inside, true},
		{s, "GET", "GET /b", inside, true},
		{s, "GET", "GET /c", inside, false},
		{s, "GET", "", inside, false},
		{s, "GET", "GET /a/{id}", outside, false},
		{s, "GET", "GET /a/{id}", netip.MustParseAddr("::ffff:10.9.9.9"), true},
		{&enforce.Scope{ReadOnly: true}, "HEAD", "HEAD /x", outside, true},
		{&enforce.Scope{ReadOnly: true}, "PATCH", "/x", outside, false},
	} {
		if _, ok := tc.scope.Permits(tc.method, tc.route, tc.addr); ok != tc.want {
			t.Errorf("%+v.Permits(%s, %q, %s) = %v, want %v", tc.scope, tc.method, tc.route, tc.addr, ok, tc.want)
		}
	}
}
