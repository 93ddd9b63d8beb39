// Package egress is how Sluice connects to addresses that someone else
// chose: a developer's webhook, an operator's upstream, and later an identity
// provider or a mail server. Every such connection goes through a Dialer,
// which decides on the address actually dialed, after resolution, in the
// dialer's Control hook: a name that resolves to a private address, a DNS
// answer that changes between a check and the dial (rebinding), 0, octal
// and hex spellings of 127.0.0.1 and IPv4 written as IPv6 all end at the
// same check. Text checks on URLs (CheckHost) exist for clear errors when
// a URL is saved, never as the guard.
//
// Two policies: Public (the default) reaches globally routable unicast
// addresses only; Internal, for the reverse proxy's upstreams, which are
// usually services on the operator's network, also reaches loopback,
// private and CGNAT addresses, and still refuses link-local, cloud
// metadata, reserved, unspecified and multicast ones. An operator's
// Allowlist opens private receivers on purpose.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Policy is which kinds of address a Dialer reaches.
type Policy int

const (
	// Public reaches globally routable unicast addresses only: webhooks,
	// and any other destination a user other than the operator names.
	Public Policy = iota
	// Internal also reaches loopback, private and CGNAT addresses: the
	// upstreams an operator declares behind the reverse proxy.
	Internal
)

func (p Policy) String() string {
	if p == Internal {
		return "internal"
	}
	return "public"
}

// reaches says whether the policy alone lets a kind of address through.
func (p Policy) reaches(k Kind) bool {
	switch k {
	case KindPublic:
		return true
	case KindLoopback, KindPrivate, KindShared:
		return p == Internal
	}
	return false
}

// ErrRefused is matched (errors.Is) by every refusal of a destination.
var ErrRefused = errors.New("egress: destination refused")

// RefusedError is a destination a Dialer or a check refused. Its text is
// for the operator's log: it names the host and the address. What is shown
// to the person who chose the destination should say "refused" and little
// more (see package alerts).
type RefusedError struct {
	// Host is the name or address as the URL wrote it.
	Host string
	// Addr is the address refused; invalid when the host was refused as
	// written (a name such as localhost, an odd spelling of an address).
	Addr netip.Addr
	// Reason says why, e.g. "loopback address" or "not a canonical IP
	// address".
	Reason string
}

func (e *RefusedError) Error() string {
	if e.Addr.IsValid() && e.Addr.String() != e.Host {
		return fmt.Sprintf("egress: %s (%s) refused: %s", e.Host, e.Addr, e.Reason)
	}
	return fmt.Sprintf("egress: %s refused: %s", e.Host, e.Reason)
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Allowlist is the operator's exceptions: destinations reached although the
// policy refuses them. An address inside one of Prefixes is reached whatever
// its kind (the operator wrote the block), except unspecified and multicast
// addresses, which are never a receiver. A host name in Hosts reaches the
// loopback, private, CGNAT and public addresses it resolves to, never
// link-local, metadata or reserved ones.
type Allowlist struct {
	Prefixes []netip.Prefix
	// Hosts are lowercase names without a trailing dot.
	Hosts []string
}

// ParseAllowlist reads a comma-separated list of CIDR prefixes, IP
// addresses and host names, e.g. "10.0.0.0/8, 192.168.1.5, hooks.internal".
func ParseAllowlist(s string) (Allowlist, error) {
	var a Allowlist
	for field := range strings.SplitSeq(s, ",") {
		field = strings.TrimSpace(field)
		switch {
		case field == "":
			continue
		case strings.Contains(field, "/"):
			p, err := netip.ParsePrefix(field)
			if err != nil {
				return Allowlist{}, fmt.Errorf("%q is not a CIDR prefix", field)
			}
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			a.Prefixes = append(a.Prefixes, p.Masked())
		default:
			if ip, err := netip.ParseAddr(strings.Trim(field, "[]")); err == nil {
				ip = ip.Unmap()
				a.Prefixes = append(a.Prefixes, netip.PrefixFrom(ip, ip.BitLen()))
				continue
			}
			h := strings.TrimSuffix(strings.ToLower(field), ".")
			if !validHostname(h) || numericHost(h) {
				return Allowlist{}, fmt.Errorf("%q is not an IP address, a CIDR prefix or a host name", field)
			}
			a.Hosts = append(a.Hosts, h)
		}
	}
	return a, nil
}

// String writes the list the way ParseAllowlist reads it.
func (a Allowlist) String() string {
	parts := make([]string, 0, len(a.Prefixes)+len(a.Hosts))
	for _, p := range a.Prefixes {
		parts = append(parts, p.String())
	}
	return strings.Join(append(parts, a.Hosts...), ",")
}

func (a Allowlist) hasHost(host string) bool {
	return slices.Contains(a.Hosts, strings.TrimSuffix(strings.ToLower(host), "."))
}

func (a Allowlist) hasAddr(ip netip.Addr) bool {
	for _, p := range a.Prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Rules is a policy with the operator's exceptions: what one Dialer
// reaches.
type Rules struct {
	Policy Policy
	Allow  Allowlist
}

// CheckAddr decides on ip, dialed for host: nil when it may be reached,
// else a *RefusedError.
func (r Rules) CheckAddr(host string, ip netip.Addr) error {
	ip = ip.WithZone("").Unmap()
	kind := Classify(ip)
	switch {
	case kind == KindUnspecified || kind == KindMulticast:
	case r.Policy.reaches(kind), r.Allow.hasAddr(ip):
		return nil
	case r.Allow.hasHost(host) && (kind == KindLoopback || kind == KindPrivate || kind == KindShared):
		return nil
	}
	return &RefusedError{Host: host, Addr: ip, Reason: kind.String() + " address"}
}

// CheckHost decides on a URL's host as written (no port; an IPv6 literal
// with or without brackets), without resolving it: an address is checked
// as CheckAddr does; localhost names (for Public) and metadata names are
// refused; so are numbers that only some parsers read as IPv4 addresses
// ("0", "0177.0.0.1", "0x7f000001", "2130706433", "127.1"), whatever they
// would reach. A name that passes may still be refused when dialed.
func (r Rules) CheckHost(host string) error {
	h := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if h == "" {
		return &RefusedError{Host: host, Reason: "no host"}
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return &RefusedError{Host: host, Addr: ip, Reason: "an address with a zone is link-local"}
		}
		return r.CheckAddr(host, ip)
	}
	if r.Allow.hasHost(h) {
		return nil
	}
	switch {
	case numericHost(h):
		return &RefusedError{Host: host, Reason: "not a canonical IP address (write IPv4 as four decimal numbers)"}
	case metadataName(h):
		return &RefusedError{Host: host, Reason: "cloud metadata name"}
	case r.Policy == Public && (h == "localhost" || strings.HasSuffix(h, ".localhost")):
		return &RefusedError{Host: host, Reason: "loopback name"}
	case !validHostname(h):
		return &RefusedError{Host: host, Reason: "not a host name"}
	}
	return nil
}

// numericHost is a host whose last label is a number (decimal, octal or
// 0x hex): URL parsers and inet_aton read such a host as an IPv4 address,
// and no top-level domain is numeric.
func numericHost(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	digits := last
	if len(last) > 1 && (last[:2] == "0x") {
		digits = last[2:]
		if digits == "" {
			return true
		}
		return strings.Trim(digits, "0123456789abcdef") == ""
	}
	return strings.Trim(digits, "0123456789") == ""
}

// metadataName is a name the clouds resolve to their metadata services.
func metadataName(h string) bool {
	switch h {
	case "metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal":
		return true
	}
	return false
}

func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
