package egress_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/internal/egress"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want egress.Kind
	}{
		{"93.184.215.14", egress.KindPublic},
		{"8.8.8.8", egress.KindPublic},
		{"2606:4700:4700::1111", egress.KindPublic},
		{"127.0.0.1", egress.KindLoopback},
		{"127.255.255.254", egress.KindLoopback},
		{"::1", egress.KindLoopback},
		{"::ffff:127.0.0.1", egress.KindLoopback},
		{"64:ff9b::7f00:1", egress.KindLoopback}, // NAT64 of 127.0.0.1
		{"2002:7f00:1::1", egress.KindLoopback},  // 6to4 of 127.0.0.1
		{"2002:5db8:d70e::1", egress.KindPublic}, // 6to4 of a public address
		{"64:ff9b::a00:1", egress.KindPrivate},   // NAT64 of 10.0.0.1
		{"10.1.2.3", egress.KindPrivate},
		{"172.16.0.1", egress.KindPrivate},
		{"172.31.255.255", egress.KindPrivate},
		{"172.32.0.1", egress.KindPublic},
		{"192.168.1.1", egress.KindPrivate},
		{"::ffff:192.168.1.1", egress.KindPrivate},
		{"fc00::1", egress.KindPrivate},
		{"fd12:3456::1", egress.KindPrivate},
		{"100.64.0.1", egress.KindShared},
		{"100.127.255.255", egress.KindShared},
		{"100.128.0.1", egress.KindPublic},
		{"169.254.169.254", egress.KindLinkLocal},
		{"::ffff:169.254.169.254", egress.KindLinkLocal},
		{"fe80::1", egress.KindLinkLocal},
		{"fe80::1%eth0", egress.KindLinkLocal},
		{"fd00:ec2::254", egress.KindMetadata},
		{"100.100.100.200", egress.KindMetadata},
		{"168.63.129.16", egress.KindMetadata},
		{"0.0.0.0", egress.KindUnspecified},
		{"0.1.2.3", egress.KindUnspecified},
		{"::", egress.KindUnspecified},
		{"::ffff:0.0.0.0", egress.KindUnspecified},
		{"224.0.0.1", egress.KindMulticast},
		{"239.255.255.250", egress.KindMulticast},
		{"255.255.255.255", egress.KindMulticast},
		{"ff02::1", egress.KindMulticast},
		{"192.0.2.1", egress.KindReserved},
		{"198.18.0.1", egress.KindReserved},
		{"240.0.0.1", egress.KindReserved},
		{"2001:db8::1", egress.KindReserved},
		{"2001::1", egress.KindReserved},  // Teredo
		{"::7f00:1", egress.KindReserved}, // IPv4-compatible
		{"fec0::1", egress.KindReserved},
		{"4000::1", egress.KindReserved}, // outside 2000::/3
	} {
		if got := egress.Classify(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Classify(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

func TestParseAllowlist(t *testing.T) {
	a, err := egress.ParseAllowlist(" 10.0.0.0/8, 192.168.1.5 ,Hooks.Internal., [fd00::1], ::ffff:172.16.0.0/108,")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.String(), "10.0.0.0/8,192.168.1.5/32,fd00::1/128,172.16.0.0/12,hooks.internal"; got != want {
		t.Errorf("parsed %q, want %q", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "0177.0.0.1", "not a host", "-x.example", "10.0.0.0/8,exa mple"} {
		if _, err := egress.ParseAllowlist(bad); err == nil {
			t.Errorf("ParseAllowlist(%q) accepted", bad)
		}
	}
	if a, err := egress.ParseAllowlist(""); err != nil || len(a.Prefixes)+len(a.Hosts) != 0 {
		t.Errorf("empty list: %+v, %v", a, err)
	}
}

func TestCheckHost(t *testing.T) {
	allow, err := egress.ParseAllowlist("10.1.0.0/16, hooks.internal, 169.254.10.0/24")
	if err != nil {
		t.Fatal(err)
	}
	public := egress.Rules{}
	allowed := egress.Rules{Allow: allow}
	internal := egress.Rules{Policy: egress.Internal}
	for _, tc := range []struct {
		rules egress.Rules
		host  string
		ok    bool
	}{
		{public, "example.com", true},
		{public, "93.184.215.14", true},
		{public, "[2606:4700:4700::1111]", true},
		{public, "127.0.0.1", false},
		{public, "[::1]", false},
		{public, "::1", false},
		{public, "[::ffff:127.0.0.1]", false},
		{public, "[::ffff:7f00:1]", false},
		{public, "localhost", false},
		{public, "LOCALHOST.", false},
		{public, "api.localhost", false},
		{public, "0", false},
		{public, "0.0.0.0", false},
		{public, "0177.0.0.1", false},
		{public, "0x7f000001", false},
		{public, "0x7f.1", false},
		{public, "2130706433", false},
		{public, "127.1", false},
		{public, "10.0.0.1", false},
		{public, "172.16.5.4", false},
		{public, "192.168.0.10", false},
		{public, "100.64.1.1", false},
		{public, "169.254.169.254", false},
		{public, "[fe80::1%25eth0]", false},
		{public, "[fd00:ec2::254]", false},
		{public, "metadata.google.internal", false},
		{public, "224.0.0.1", false},
		{public, "hooks.internal", true}, // a name: decided when dialed
		{allowed, "10.1.2.3", true},
		{allowed, "10.2.0.1", false},
		{allowed, "hooks.internal", true},
		{allowed, "169.254.10.7", true},     // the operator wrote the block
		{allowed, "169.254.169.254", false}, // not in it
		{internal, "127.0.0.1", true},
		{internal, "localhost", true},
		{internal, "10.0.0.5", true},
		{internal, "[fd12::5]", true},
		{internal, "100.64.0.7", true},
		{internal, "169.254.169.254", false},
		{internal, "[fe80::1]", false},
		{internal, "[::ffff:169.254.169.254]", false},
		{internal, "[fd00:ec2::254]", false},
		{internal, "100.100.100.200", false},
		{internal, "0.0.0.0", false},
		{internal, "0", false},
		{internal, "metadata.google.internal", false},
		{internal, "192.0.2.1", false},
	} {
		err := tc.rules.CheckHost(tc.host)
		if (err == nil) != tc.ok {
			t.Errorf("%s policy, allow %q: CheckHost(%q) = %v, want ok %v", tc.rules.Policy, tc.rules.Allow, tc.host, err, tc.ok)
		}
		if err != nil && !errors.Is(err, egress.ErrRefused) {
			t.Errorf("CheckHost(%q) = %v, not ErrRefused", tc.host, err)
		}
	}
}

// TestUnspecifiedNeverAllowed: even an allowlist that covers everything
// does not reach 0.0.0.0 (Linux connects it to this machine) or multicast.
func TestUnspecifiedNeverAllowed(t *testing.T) {
	all, err := egress.ParseAllowlist("0.0.0.0/0, ::/0")
	if err != nil {
		t.Fatal(err)
	}
	r := egress.Rules{Policy: egress.Internal, Allow: all}
	for _, a := range []string{"0.0.0.0", "::", "224.0.0.1", "ff02::1", "255.255.255.255"} {
		if err := r.CheckAddr(a, netip.MustParseAddr(a)); !errors.Is(err, egress.ErrRefused) {
			t.Errorf("CheckAddr(%s) = %v, want refused", a, err)
		}
	}
	if err := r.CheckAddr("x", netip.MustParseAddr("169.254.169.254")); err != nil {
		t.Errorf("an allowlisted block is the operator's choice: %v", err)
	}
}
