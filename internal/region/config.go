// Package region runs Sluice over several regions, each with its own Redis.
// It wraps the engine's Store (the engine knows no regions) in one of three
// modes: shared (one Redis for every region: the engine as it is), share
// (each region enforces its weighted share of every limit on its own Redis)
// or sync (each region decides on its own Redis, whose state holds its own
// consumption plus what the other regions published, and publishes its own
// every interval; a region that cannot reach a peer enforces its share until
// the peer answers again).
package region

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Mode is how the regions share a limit.
type Mode string

// The three modes; README.md states each one's over-admission bound.
const (
	// Shared: one Redis (or Redis Cluster) for every region; exact, every
	// decision pays the round trip to it.
	Shared Mode = "shared"
	// Share: each region enforces floor(limit × weight / total weight), at
	// least 1, on its own Redis; never more than the limit in all.
	Share Mode = "share"
	// Sync: each region counts its own consumption plus the others' last
	// published consumption, and publishes its own every interval.
	Sync Mode = "sync"
)

// Valid reports whether m is one of the three modes.
func (m Mode) Valid() bool { return m == Shared || m == Share || m == Sync }

// Weight is one region's name and its weight in the share of a limit.
type Weight struct {
	Name   string
	Weight int64
}

// Errors of the configuration parsers; the portal's config names the
// variable around them.
var (
	ErrBadRegions = errors.New("invalid region list")
	ErrBadPeers   = errors.New("invalid peer list")
)

// ParseRegions reads a region list such as "eu=2,us=1" or "eu,us,ap"
// (weights default to 1). Names are letters, digits, '-' and '_'.
func ParseRegions(s string) ([]Weight, error) {
	var out []Weight
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, w, hasWeight := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		if !validName(name) {
			return nil, fmt.Errorf("%w: region name %q: use letters, digits, '-' or '_'", ErrBadRegions, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: region %q listed twice", ErrBadRegions, name)
		}
		seen[name] = true
		weight := int64(1)
		if hasWeight {
			n, err := strconv.ParseInt(strings.TrimSpace(w), 10, 64)
			if err != nil || n < 1 || n > 1_000_000 {
				return nil, fmt.Errorf("%w: region %q: weight %q is not a whole number from 1 to 1000000", ErrBadRegions, name, w)
			}
			weight = n
		}
		out = append(out, Weight{Name: name, Weight: weight})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no region", ErrBadRegions)
	}
	return out, nil
}

// ParsePeers reads "us=redis://...,ap=redis://..." into URLs by region
// name, sorted by name.
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, url, ok := strings.Cut(item, "=")
		name, url = strings.TrimSpace(name), strings.TrimSpace(url)
		if !ok || url == "" {
			return nil, fmt.Errorf("%w: %q is not region=redis://host:port", ErrBadPeers, item)
		}
		if !validName(name) {
			return nil, fmt.Errorf("%w: region name %q: use letters, digits, '-' or '_'", ErrBadPeers, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: region %q listed twice", ErrBadPeers, name)
		}
		seen[name] = true
		out = append(out, Peer{Name: name, URL: url})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Peer is another region as configured: its name and its Redis URL.
type Peer struct {
	Name string
	URL  string
}

// Config is one region's view of the regions.
type Config struct {
	// Region is this instance's region; it must be listed in Regions.
	Region string
	// Regions lists every region with its weight.
	Regions []Weight
	Mode    Mode
	// Interval is how often sync publishes (default DefaultInterval).
	Interval time.Duration
	// MaxSubjectsPerSync bounds the subjects published to each peer per
	// interval (default 20,000); the rest wait for the next one.
	MaxSubjectsPerSync int
	// MaxPending bounds the subjects whose consumption awaits
	// publication, and each peer's backlog (default 200,000). A subject
	// that finds the table full is held to this region's share as well and
	// not published: the memory stays bounded, and what the peers miss of
	// it stays within the share (Status.Overflow counts such decisions).
	MaxPending int
}

// DefaultInterval is sync's publication interval when Config leaves it 0.
const DefaultInterval = time.Second

// Validate checks c and fills its defaults; peers are the configured peers'
// names (sync needs one for every other region; share may name some, to
// show their usage; shared none).
func (c *Config) Validate(peers []string) error {
	if !c.Mode.Valid() {
		return fmt.Errorf("mode %q is not shared, share or sync", c.Mode)
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Interval < 10*time.Millisecond {
		return fmt.Errorf("sync interval %s is below 10ms", c.Interval)
	}
	if c.MaxSubjectsPerSync == 0 {
		c.MaxSubjectsPerSync = 20_000
	}
	if c.MaxPending == 0 {
		c.MaxPending = 200_000
	}
	if c.Mode == Shared {
		return nil
	}
	if c.weight(c.Region) == 0 {
		return fmt.Errorf("region %q is not in the region list", c.Region)
	}
	want := map[string]bool{}
	for _, w := range c.Regions {
		if w.Name != c.Region {
			want[w.Name] = true
		}
	}
	for _, p := range peers {
		if p == c.Region {
			return fmt.Errorf("peer %q is this region", p)
		}
		if !want[p] {
			return fmt.Errorf("peer %q is not in the region list", p)
		}
		delete(want, p)
	}
	if c.Mode != Sync {
		// share reads its peers only to show their state and usage.
		return nil
	}
	for _, w := range c.Regions {
		if want[w.Name] {
			return fmt.Errorf("sync needs the Redis URL of region %q", w.Name)
		}
	}
	return nil
}

func (c *Config) weight(name string) int64 {
	for _, w := range c.Regions {
		if w.Name == name {
			return w.Weight
		}
	}
	return 0
}

func (c *Config) totalWeight() int64 {
	var t int64
	for _, w := range c.Regions {
		t += w.Weight
	}
	return t
}
