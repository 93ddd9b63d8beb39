package policy

import (
	"slices"

	"github.com/sluicehq/sluice/internal/enforce"
)

// ForRoutes is d cut to what a program enforcing only routes (one
// service's declared patterns) needs: each plan's limits and each key's own
// limits cut to the plan-wide ones and those naming one of routes, only the
// plans a key or anonymous callers use, and a key's billing anchor only
// where a quota is left among its limits. Every key stays, by the hash of
// its secret: any developer's key may call any service. Another service's
// routes, tiers and the anchors of developers without a quota there are not
// in the result. d is not modified.
func (d Document) ForRoutes(routes []string) Document {
	keep := func(ls []Limit) []Limit {
		out := make([]Limit, 0, len(ls))
		for _, l := range ls {
			if l.Route == "" || slices.Contains(routes, l.Route) {
				out = append(out, l)
			}
		}
		return out
	}
	hasQuota := func(ls []Limit) bool {
		return slices.ContainsFunc(ls, func(l Limit) bool { return l.Algorithm == string(enforce.Quota) })
	}
	out := Document{Version: d.Version, AnonymousPlan: d.AnonymousPlan, Plans: map[string][]Limit{},
		AnonIPv4Prefix: d.AnonIPv4Prefix, AnonIPv6Prefix: d.AnonIPv6Prefix, Keys: make([]Key, 0, len(d.Keys))}
	use := func(plan string) {
		if ls, ok := d.Plans[plan]; ok {
			if _, done := out.Plans[plan]; !done {
				out.Plans[plan] = keep(ls)
			}
		}
	}
	use(d.AnonymousPlan)
	for _, k := range d.Keys {
		limits := keep(d.Plans[k.Plan])
		if k.Limits != nil {
			own := keep(k.Limits)
			switch {
			case len(own) == 0 && len(limits) > 0:
				// An empty list does not survive JSON (omitempty): the
				// key would get its plan's limits. No plan means none.
				k.Plan, k.Limits = "", nil
			case slices.Equal(own, limits):
				k.Limits = nil
			default:
				k.Limits = own
			}
			limits = own
		}
		use(k.Plan)
		if !hasQuota(limits) {
			k.Anchor = nil
		}
		out.Keys = append(out.Keys, k)
	}
	return out
}
