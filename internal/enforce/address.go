package enforce

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
)

// AddressPrefixes says how many leading bits of a client address name an
// anonymous subject: a whole IPv4 address (32) and an IPv6 /64 (64) by
// default, since one subscriber usually holds a /64 and can rotate through
// its addresses at will; counting each address alone would multiply the
// anonymous budget by 2^64. The zero value means those defaults. Sign-in and
// sign-up throttles use the same blocks.
type AddressPrefixes struct {
	// IPv4 is the prefix length for IPv4 clients, 1 to 32 (0 means 32).
	IPv4 int
	// IPv6 is the prefix length for IPv6 clients, 1 to 128 (0 means 64).
	IPv6 int
}

// Default prefix lengths of AddressPrefixes.
const (
	DefaultAnonIPv4Prefix = 32
	DefaultAnonIPv6Prefix = 64
)

// ErrInvalidPrefix is returned by AddressPrefixes.Validate.
var ErrInvalidPrefix = errors.New("invalid address prefix length")

// Validate refuses prefix lengths outside 0 (the default) to the address
// size; the error names the family.
func (p AddressPrefixes) Validate() error {
	if p.IPv4 < 0 || p.IPv4 > 32 {
		return fmt.Errorf("%w: IPv4 prefix %d is not between 1 and 32", ErrInvalidPrefix, p.IPv4)
	}
	if p.IPv6 < 0 || p.IPv6 > 128 {
		return fmt.Errorf("%w: IPv6 prefix %d is not between 1 and 128", ErrInvalidPrefix, p.IPv6)
	}
	return nil
}

// Block returns the address block ip is limited as: ip's prefix of the
// configured length, masked. The zero Prefix is returned for an invalid ip.
func (p AddressPrefixes) Block(ip netip.Addr) netip.Prefix {
	if !ip.IsValid() {
		return netip.Prefix{}
	}
	ip = ip.Unmap().WithZone("")
	bits := cmp.Or(p.IPv6, DefaultAnonIPv6Prefix)
	if ip.Is4() {
		bits = cmp.Or(p.IPv4, DefaultAnonIPv4Prefix)
	}
	block, err := ip.Prefix(bits)
	if err != nil {
		// Only an out-of-range length fails, which Validate refuses; the
		// whole address is the safe reading.
		return netip.PrefixFrom(ip, ip.BitLen())
	}
	return block
}

// Subject returns the anonymous subject of ip: "ip:<address>" when the
// block is one address (an IPv4 /32, an IPv6 /128), "ip:<block>" (e.g.
// "ip:2001:db8:1:2::/64") otherwise, and "ip:unknown" for an invalid ip,
// so every address of one block shares one budget.
func (p AddressPrefixes) Subject(ip netip.Addr) string {
	block := p.Block(ip)
	if !block.IsValid() {
		return "ip:unknown"
	}
	if block.IsSingleIP() {
		return "ip:" + block.Addr().String()
	}
	return "ip:" + block.String()
}
