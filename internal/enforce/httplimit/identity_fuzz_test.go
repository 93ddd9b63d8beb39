package httplimit_test

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce/httplimit"
)

// FuzzClientIPForwardedFor parses arbitrary X-Forwarded-For values behind
// arbitrary peers. Whatever the header says: an untrusted peer is the
// client; the client is the peer or one of the header's entries; and what a
// client writes to the left of the entries the trusted proxies appended
// cannot change who it is.
func FuzzClientIPForwardedFor(f *testing.F) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("127.0.0.1/32")}
	for _, s := range [][3]string{
		{"10.0.0.1:443", "203.0.113.7", "1.2.3.4"},
		{"10.0.0.1:443", "203.0.113.7, 10.0.0.2", "evil"},
		{"10.0.0.1:443", "[2001:db8::1]:80, 10.1.1.1", ""},
		{"[fd00::1]:443", "::ffff:198.51.100.4", "::1"},
		{"198.51.100.9:1234", "10.0.0.5", ""},
		{"10.0.0.1:443", "garbage, 10.0.0.3", "203.0.113.1"},
		{"10.0.0.1:443", "fe80::1%eth0", ""},
		{"not an address", "203.0.113.7", ""},
		{"10.0.0.1:443", ",,, ,", "x"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, remote, xff, spoof string) {
		if strings.ContainsAny(xff+spoof, "\r\n") {
			return // not expressible in one header line
		}
		ip := func(header string) netip.Addr {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = remote
			if header != "" {
				r.Header.Set("X-Forwarded-For", header)
			}
			return httplimit.ClientIP(r, trusted)
		}
		got := ip(xff)
		peer, perr := netip.ParseAddrPort(remote)
		if perr != nil {
			return
		}
		p := peer.Addr().Unmap().WithZone("")
		if !got.IsValid() {
			t.Fatalf("peer %q, XFF %q: invalid client", remote, xff)
		}
		trustedPeer := false
		for _, pre := range trusted {
			trustedPeer = trustedPeer || pre.Contains(p)
		}
		if !trustedPeer && got != p {
			t.Fatalf("untrusted peer %q, XFF %q: client %s, want the peer", remote, xff, got)
		}
		if got != p && !mentions(xff, got) {
			t.Fatalf("peer %q, XFF %q: client %s is neither the peer nor an entry", remote, xff, got)
		}
		untrusted := true
		for _, pre := range trusted {
			untrusted = untrusted && !pre.Contains(got)
		}
		if trustedPeer && untrusted && got != p {
			// The trusted proxies appended entries up to the client's: what
			// the client itself wrote before them cannot change the answer.
			if again := ip(spoof + ", " + xff); again != got {
				t.Fatalf("peer %q, XFF %q: client %s, but %s once the client prepends %q", remote, xff, got, again, spoof)
			}
		}
	})
}

// mentions reports whether some entry of xff parses to a.
func mentions(xff string, a netip.Addr) bool {
	for _, e := range strings.Split(xff, ",") {
		e = strings.TrimSpace(e)
		if ap, err := netip.ParseAddrPort(e); err == nil && ap.Addr().Unmap().WithZone("") == a {
			return true
		}
		if x, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(e, "["), "]")); err == nil && x.Unmap().WithZone("") == a {
			return true
		}
	}
	return false
}
