package httplimit_test

import (
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce/httplimit"
)

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		name       string
		remoteAddr string
		xff        []string
		trusted    []netip.Prefix
		want       string
	}{
		{name: "NoProxyUsesPeer", remoteAddr: "203.0.113.9:5123", want: "203.0.113.9"},
		{name: "SpoofFromUntrustedPeerIgnored", remoteAddr: "203.0.113.9:5123", xff: []string{"1.2.3.4"}, trusted: trusted, want: "203.0.113.9"},
		{name: "SpoofFromUntrustedPeerIgnoredWithoutTrustList", remoteAddr: "203.0.113.9:5123", xff: []string{"10.0.0.1"}, want: "203.0.113.9"},
		{name: "TrustedPeerWithoutHeaderUsesPeer", remoteAddr: "10.0.0.1:80", trusted: trusted, want: "10.0.0.1"},
		{name: "TrustedPeerNamesClient", remoteAddr: "10.0.0.1:80", xff: []string{"198.51.100.7"}, trusted: trusted, want: "198.51.100.7"},
		{name: "ClientSpoofedLeftEntryIgnored", remoteAddr: "10.0.0.1:80", xff: []string{"1.2.3.4, 198.51.100.7"}, trusted: trusted, want: "198.51.100.7"},
		{name: "TrustedHopsSkipped", remoteAddr: "10.0.0.1:80", xff: []string{"1.2.3.4, 198.51.100.7, 10.9.9.9, 10.0.0.2"}, trusted: trusted, want: "198.51.100.7"},
		{name: "SeveralHeaderLinesAreOneList", remoteAddr: "10.0.0.1:80", xff: []string{"1.2.3.4, 198.51.100.7", "10.0.0.2"}, trusted: trusted, want: "198.51.100.7"},
		{name: "GarbageRightmostFallsBackToPeer", remoteAddr: "10.0.0.1:80", xff: []string{"198.51.100.7, not-an-ip"}, trusted: trusted, want: "10.0.0.1"},
		{name: "GarbageAfterTrustedHopFallsBackToThatHop", remoteAddr: "10.0.0.1:80", xff: []string{"<script>, 10.0.0.5"}, trusted: trusted, want: "10.0.0.5"},
		{name: "GarbageLeftOfClientIgnored", remoteAddr: "10.0.0.1:80", xff: []string{"garbage, 198.51.100.7"}, trusted: trusted, want: "198.51.100.7"},
		{name: "EmptyEntriesSkipped", remoteAddr: "10.0.0.1:80", xff: []string{" , 198.51.100.7 ,, "}, trusted: trusted, want: "198.51.100.7"},
		{name: "AllHopsTrustedTakesLeftmost", remoteAddr: "10.0.0.1:80", xff: []string{"10.0.0.3, 10.0.0.2"}, trusted: trusted, want: "10.0.0.3"},
		{name: "EntryWithPort", remoteAddr: "10.0.0.1:80", xff: []string{"198.51.100.7:4711"}, trusted: trusted, want: "198.51.100.7"},
		{name: "IPv6EntryBracketedWithPort", remoteAddr: "[fd00::1]:443", xff: []string{"[2001:db8::5]:4711"}, trusted: trusted, want: "2001:db8::5"},
		{name: "IPv6EntryBare", remoteAddr: "[fd00::1]:443", xff: []string{"2001:db8::5"}, trusted: trusted, want: "2001:db8::5"},
		{name: "MappedIPv4Unmapped", remoteAddr: "[::ffff:10.0.0.1]:80", xff: []string{"::ffff:198.51.100.7"}, trusted: trusted, want: "198.51.100.7"},
		{name: "PeerWithoutPort", remoteAddr: "203.0.113.9", want: "203.0.113.9"},
		{name: "UnparseablePeerIsInvalid", remoteAddr: "somewhere", xff: []string{"198.51.100.7"}, trusted: trusted, want: "invalid IP"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remoteAddr
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := httplimit.ClientIP(r, tc.trusted).String(); got != tc.want {
				t.Errorf("ClientIP = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestParseTrustedProxies(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    []netip.Prefix
		wantErr bool
	}{
		{name: "EmptyTrustsNobody", in: "", want: nil},
		{name: "PrefixesAndBareAddresses", in: "10.0.0.0/8, 192.168.1.7 ,fd00::/8,::1",
			want: []netip.Prefix{
				netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
				netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("::1/128"),
			}},
		{name: "PrefixMasked", in: "10.1.2.3/8", want: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
		{name: "GarbageRejected", in: "10.0.0.0/8, proxy.local", wantErr: true},
		{name: "BadPrefixLengthRejected", in: "10.0.0.0/33", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := httplimit.ParseTrustedProxies(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("prefixes = %v, want %v", got, tc.want)
			}
		})
	}
}
