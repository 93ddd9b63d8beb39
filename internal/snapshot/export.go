package snapshot

import (
	"cmp"
	"encoding/hex"
	"slices"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/policy"
)

// Policy returns the snapshot as the policy document programs outside the
// portal enforce (see internal/policy), stamped with version. Keys whose
// limits are their plan's name the plan only.
func (s *Snapshot) Policy(version uint64) policy.Document {
	d := policy.Document{Version: version, Plans: make(map[string][]policy.Limit, len(s.plans))}
	planLimits := make(map[string][]enforce.Limit, len(s.plans))
	for i := range s.plans {
		p := &s.plans[i]
		planLimits[p.Slug] = p.EnforceLimits()
		d.Plans[p.Slug] = policy.FromEngine(planLimits[p.Slug])
	}
	if s.anonymous != nil {
		d.AnonymousPlan = s.anonymous.Slug
	}
	for hash, e := range s.keys {
		k := policy.Key{Hash: hex.EncodeToString(hash[:]), KeyID: e.caller.KeyID, UserID: e.caller.UserID, Plan: e.caller.Plan}
		if sc := e.caller.Scope; sc != nil {
			k.AllowedRoutes, k.AllowedCIDRs, k.ReadOnly = sc.Routes, sc.CIDRs, sc.ReadOnly
		}
		if pl, ok := planLimits[e.caller.Plan]; !ok || !slices.Equal(e.caller.Limits, pl) {
			k.Limits = policy.FromEngine(e.caller.Limits)
		}
		if !e.secretExpires.IsZero() {
			t := e.secretExpires
			k.SecretExpires = &t
		}
		if !e.caller.Anchor.IsZero() {
			t := e.caller.Anchor
			k.Anchor = &t
		}
		if !e.keyExpires.IsZero() {
			t := e.keyExpires
			k.KeyExpires = &t
		}
		d.Keys = append(d.Keys, k)
	}
	slices.SortFunc(d.Keys, func(a, b policy.Key) int { return cmp.Compare(a.KeyID, b.KeyID) })
	return d
}
