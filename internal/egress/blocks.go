package egress

import "net/netip"

// Kind is what an address is, as far as reaching it from Sluice goes.
type Kind int

// Kinds of address, from the ones any policy reaches to the ones none does.
const (
	// KindPublic is a globally routable unicast address.
	KindPublic Kind = iota
	// KindLoopback is 127.0.0.0/8 or ::1: this machine.
	KindLoopback
	// KindPrivate is 10/8, 172.16/12, 192.168/16, fc00::/7 and the local
	// NAT64 block: the operator's own network.
	KindPrivate
	// KindShared is the carrier-grade NAT block 100.64.0.0/10 (also used by
	// overlay networks such as Tailscale).
	KindShared
	// KindLinkLocal is 169.254.0.0/16 and fe80::/10, where the clouds'
	// metadata services live.
	KindLinkLocal
	// KindMetadata is a cloud metadata or host service outside link-local
	// space (AWS's fd00:ec2::254, Alibaba's 100.100.100.200, Azure's
	// 168.63.129.16): credentials of the machine Sluice runs on.
	KindMetadata
	// KindReserved is documentation, benchmarking, protocol-assignment and
	// future-use space, and IPv6 outside 2000::/3: nothing a receiver is on.
	KindReserved
	// KindUnspecified is 0.0.0.0/8 and ::, which Linux connects to this
	// machine.
	KindUnspecified
	// KindMulticast is 224.0.0.0/4, ff00::/8 and the broadcast address.
	KindMulticast
)

var kindNames = [...]string{
	KindPublic:      "public",
	KindLoopback:    "loopback",
	KindPrivate:     "private",
	KindShared:      "shared (CGNAT)",
	KindLinkLocal:   "link-local",
	KindMetadata:    "cloud metadata",
	KindReserved:    "reserved",
	KindUnspecified: "unspecified",
	KindMulticast:   "multicast or broadcast",
}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "unknown"
	}
	return kindNames[k]
}

type block struct {
	prefix netip.Prefix
	kind   Kind
}

func blocks(kind Kind, prefixes ...string) []block {
	out := make([]block, len(prefixes))
	for i, p := range prefixes {
		out[i] = block{netip.MustParsePrefix(p), kind}
	}
	return out
}

// v4Blocks are the IPv4 blocks that are not public (RFC 6890 and its
// updates), the single metadata addresses first so that they win over the
// block they sit in.
var v4Blocks = concat(
	blocks(KindMetadata, "100.100.100.200/32", "168.63.129.16/32"),
	blocks(KindUnspecified, "0.0.0.0/8"),
	blocks(KindMulticast, "224.0.0.0/4", "255.255.255.255/32"),
	blocks(KindLoopback, "127.0.0.0/8"),
	blocks(KindPrivate, "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
	blocks(KindShared, "100.64.0.0/10"),
	blocks(KindLinkLocal, "169.254.0.0/16"),
	blocks(KindReserved,
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // TEST-NET-1
		"192.88.99.0/24",  // 6to4 relay anycast
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // TEST-NET-2
		"203.0.113.0/24",  // TEST-NET-3
		"240.0.0.0/4",     // future use
	),
)

// v6Blocks are the IPv6 blocks that are not public. Blocks that embed an
// IPv4 address (mapped, NAT64, 6to4) are handled by classify before these.
var v6Blocks = concat(
	blocks(KindMetadata, "fd00:ec2::254/128"),
	blocks(KindUnspecified, "::/128"),
	blocks(KindLoopback, "::1/128"),
	blocks(KindMulticast, "ff00::/8"),
	blocks(KindPrivate, "fc00::/7", "64:ff9b:1::/48"),
	blocks(KindLinkLocal, "fe80::/10"),
	blocks(KindReserved,
		"::/96",         // IPv4-compatible (deprecated)
		"100::/64",      // discard
		"2001::/23",     // IETF protocol assignments, Teredo among them
		"2001:db8::/32", // documentation
		"3fff::/20",     // documentation
		"fec0::/10",     // site-local (deprecated)
	),
)

var globalUnicast6 = netip.MustParsePrefix("2000::/3")

func concat(lists ...[]block) []block {
	var out []block
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// Classify says what kind of address a is. IPv4 written as IPv6 (mapped
// ::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d, 6to4 2002:aabb:ccdd::) is the
// kind of the IPv4 address it reaches.
func Classify(a netip.Addr) Kind {
	a = a.WithZone("").Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			return Classify(netip.AddrFrom4([4]byte(b[12:16])))
		case sixTo4.Contains(a):
			return Classify(netip.AddrFrom4([4]byte(b[2:6])))
		}
		for _, bl := range v6Blocks {
			if bl.prefix.Contains(a) {
				return bl.kind
			}
		}
		if !globalUnicast6.Contains(a) {
			return KindReserved
		}
		return KindPublic
	}
	for _, bl := range v4Blocks {
		if bl.prefix.Contains(a) {
			return bl.kind
		}
	}
	if !a.IsValid() {
		return KindUnspecified
	}
	return KindPublic
}
