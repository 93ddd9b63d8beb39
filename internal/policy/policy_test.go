package policy_test

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/policy"
)

func hashOf(secret string) string {
	h := apikeys.Hash(secret)
	return hex.EncodeToString(h[:])
}

func TestResolver(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	r := policy.NewResolver(func() time.Time { return now })
	plain, _ := apikeys.Generate()
	override, _ := apikeys.Generate()
	expired, _ := apikeys.Generate()
	unknown, _ := apikeys.Generate()
	if _, err := r.ResolveKey(plain); !errors.Is(err, policy.ErrNotLoaded) {
		t.Fatalf("before Install: %v, want ErrNotLoaded", err)
	}
	past := now.Add(-time.Second)
	items := []policy.Limit{{Name: "basic-items", Algorithm: "fixed_window", Limit: 3, WindowMS: 60000, Route: "GET /items/{id}"}}
	doc := policy.Document{Version: 7, AnonymousPlan: "anon",
		Plans: map[string][]policy.Limit{"basic": items, "anon": {{Name: "anon-all", Algorithm: "token_bucket", Limit: 10, WindowMS: 1000}}},
		Keys: []policy.Key{
			{Hash: hashOf(plain), KeyID: 1, UserID: 9, Plan: "basic"},
			{Hash: hashOf(override), KeyID: 2, UserID: 9, Plan: "basic", Limits: []policy.Limit{{Name: "basic-items", Algorithm: "fixed_window", Limit: 100, WindowMS: 60000, Route: "GET /items/{id}"}}},
			{Hash: hashOf(expired), KeyID: 3, Plan: "basic", KeyExpires: &past},
		}}
	if err := r.Install(doc); err != nil {
		t.Fatal(err)
	}
	if r.Version() != 7 {
		t.Errorf("Version = %d", r.Version())
	}

	c, err := r.ResolveKey(plain)
	want := enforce.Limit{Name: "basic-items", Algorithm: enforce.FixedWindow, Limit: 3, Window: time.Minute, Route: "GET /items/{id}"}
	if err != nil || c.Subject != "dev:9" || c.Key != "key:1" || c.UserID != 9 || c.Plan != "basic" || len(c.Limits) != 1 || c.Limits[0] != want {
		t.Errorf("plain key: %+v, %v", c, err)
	}
	// Keys of one plan share one slice, as in the portal's snapshot.
	doc.Keys = append(doc.Keys, policy.Key{Hash: hashOf(unknown), KeyID: 4, Plan: "basic"})
	if err := r.Install(doc); err != nil {
		t.Fatal(err)
	}
	a, _ := r.ResolveKey(plain)
	b, _ := r.ResolveKey(unknown)
	if &a.Limits[0] != &b.Limits[0] {
		t.Error("two keys of one plan got separate limit slices")
	}
	if c, _ := r.ResolveKey(override); c.Limits[0].Limit != 100 {
		t.Errorf("override key: %+v", c.Limits)
	}
	for name, secret := range map[string]string{"Expired": expired, "Malformed": "nope"} {
		if _, err := r.ResolveKey(secret); !errors.Is(err, enforce.ErrInvalidKey) {
			t.Errorf("%s: %v, want ErrInvalidKey", name, err)
		}
	}
	anon := r.Anonymous(netip.MustParseAddr("192.0.2.1"))
	if anon.Subject != "ip:192.0.2.1" || anon.Plan != "anon" || len(anon.Limits) != 1 {
		t.Errorf("anonymous: %+v", anon)
	}
	// Addresses of one IPv6 /64 are one anonymous caller, as in the portal;
	// the document's blocks are honoured.
	v6a := r.Anonymous(netip.MustParseAddr("2001:db8:1:2::1"))
	v6b := r.Anonymous(netip.MustParseAddr("2001:db8:1:2:ffff::9"))
	if v6a.Subject != "ip:2001:db8:1:2::/64" || v6b.Subject != v6a.Subject {
		t.Errorf("one /64: subjects %q and %q, want both ip:2001:db8:1:2::/64", v6a.Subject, v6b.Subject)
	}
	wide := doc
	wide.AnonIPv4Prefix, wide.AnonIPv6Prefix = 24, 48
	if err := r.Install(wide); err != nil {
		t.Fatal(err)
	}
	if got := r.Anonymous(netip.MustParseAddr("192.0.2.77")).Subject; got != "ip:192.0.2.0/24" {
		t.Errorf("IPv4 /24 block: subject %q", got)
	}
	if err := r.Install(doc); err != nil {
		t.Fatal(err)
	}

	t.Run("QuotasKeepTheirPeriodAndAnchor", func(t *testing.T) {
		anchor := time.Date(2026, 1, 31, 9, 0, 0, 0, time.UTC)
		q := doc
		q.Plans = map[string][]policy.Limit{"basic": {{Name: "basic-month", Algorithm: "quota", Limit: 1000, WindowMS: 86400000, Period: "month"}}}
		q.Keys = []policy.Key{{Hash: hashOf(plain), KeyID: 1, UserID: 9, Plan: "basic", Anchor: &anchor}}
		if err := r.Install(q); err != nil {
			t.Fatal(err)
		}
		c, err := r.ResolveKey(plain)
		if err != nil || !c.Anchor.Equal(anchor) || len(c.Limits) != 1 || c.Limits[0].Period != enforce.PeriodMonth {
			t.Errorf("quota key: %+v, %v", c, err)
		}
		q.Plans["basic"][0].Period = ""
		if err := r.Install(q); err == nil {
			t.Error("a quota without a period was installed")
		}
		if err := r.Install(doc); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PrecisionTravels", func(t *testing.T) {
		leased := enforce.Limit{Name: "basic-items", Algorithm: enforce.SlidingWindowLog, Limit: 2000, Window: time.Minute,
			Route: "GET /items/{id}", PerKey: true, Precision: enforce.PrecisionLeased}
		wire := policy.FromEngine([]enforce.Limit{leased})
		if wire[0].Precision != "leased" {
			t.Fatalf("FromEngine: precision %q, want leased", wire[0].Precision)
		}
		if exact := policy.FromEngine([]enforce.Limit{{Name: "x", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Second}}); exact[0].Precision != "" {
			t.Errorf("an exact limit travels as precision %q, want it left out", exact[0].Precision)
		}
		p := doc
		p.Plans = map[string][]policy.Limit{"basic": wire}
		p.Keys = []policy.Key{{Hash: hashOf(plain), KeyID: 1, UserID: 9, Plan: "basic"}}
		if err := r.Install(p); err != nil {
			t.Fatal(err)
		}
		if c, err := r.ResolveKey(plain); err != nil || len(c.Limits) != 1 || c.Limits[0] != leased {
			t.Errorf("leased key: %+v, %v; want %+v", c.Limits, err, leased)
		}
		if err := r.Install(doc); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("BadDocumentsKeepThePrevious", func(t *testing.T) {
		for name, bad := range map[string]policy.Document{
			"BadHash":           {Keys: []policy.Key{{Hash: "zz", KeyID: 1}}},
			"BadAlgorithm":      {Plans: map[string][]policy.Limit{"p": {{Name: "x", Algorithm: "magic", Limit: 1, WindowMS: 1000}}}},
			"BadPrefix":         {AnonIPv6Prefix: 129},
			"ZeroWindow":        {Plans: map[string][]policy.Limit{"p": {{Name: "x", Algorithm: "fixed_window", Limit: 1}}}},
			"BadPrecision":      {Plans: map[string][]policy.Limit{"p": {{Name: "x", Algorithm: "fixed_window", Limit: 1, WindowMS: 1000, Precision: "roughly"}}}},
			"LeasedConcurrency": {Plans: map[string][]policy.Limit{"p": {{Name: "x", Algorithm: "concurrency", Limit: 1, WindowMS: 60000, Precision: "leased"}}}},
		} {
			if err := r.Install(bad); err == nil {
				t.Errorf("%s installed", name)
			}
		}
		if r.Version() != 7 {
			t.Errorf("a refused document replaced the policy: version %d", r.Version())
		}
	})
}
