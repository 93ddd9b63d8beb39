package enforce

// Binding returns the layer that governs the response headers: when the
// decision was rejected, the rejecting layer with the longest RetryAfter (the
// one the client must actually wait for); otherwise the layer with the least
// Remaining relative to its Limit (the one the client will run into first).
// Ties go to the earlier layer. Shadow layers (ModeShadow) never bind. A
// decision without other layers yields the zero LayerResult.
func (d Decision) Binding() LayerResult {
	if i := d.BindingIndex(); i >= 0 {
		return d.Layers[i]
	}
	return LayerResult{}
}

// binding is the index of Binding's layer, -1 when no layer binds. It
// compares the layers in place: a LayerResult is 160 bytes, and copying
// each one out as a range value was a third of the binding's cost.
func (d Decision) BindingIndex() int {
	best := -1
	for i := range d.Layers {
		l := &d.Layers[i]
		if l.Limit.Mode == ModeShadow {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &d.Layers[best]
		if !d.Allowed {
			// Only rejecting layers can bind a rejection.
			switch {
			case b.Allowed && !l.Allowed:
				best = i
			case !b.Allowed && !l.Allowed && l.RetryAfter > b.RetryAfter:
				best = i
			}
			continue
		}
		if remainingShare(l) < remainingShare(b) {
			best = i
		}
	}
	return best
}

// Degradable reports whether d is a rejection that serves the request
// reduced rather than refusing it: every layer that rejected d is in
// ModeDegrade. It names the first of them. One rejecting layer in reject
// or queue mode refuses the request; shadow layers never reject. (This is
// the tiers' degrade mode, not Outcome.Degraded, which says which store
// answered.)
func (d Decision) Degradable() (tier string, ok bool) {
	for i := range d.Layers {
		l := &d.Layers[i]
		if l.Allowed || l.Limit.Mode == ModeShadow {
			continue
		}
		if l.Limit.Mode != ModeDegrade {
			return "", false
		}
		if tier == "" {
			tier = l.Limit.Name
		}
	}
	return tier, tier != ""
}

// hasShadow reports whether any of limits is a shadow limit.
func HasShadow(limits []Limit) bool {
	for i := range limits {
		if limits[i].Mode == ModeShadow {
			return true
		}
	}
	return false
}

// hasQuota reports whether any of limits is a Quota.
func HasQuota(limits []Limit) bool {
	for i := range limits {
		if limits[i].Algorithm == Quota {
			return true
		}
	}
	return false
}

// Visible returns d as the client may see it: without its shadow layers,
// which are never shown. It returns d itself when it has none.
func (d Decision) Visible() Decision {
	n := 0
	for i := range d.Layers {
		if d.Layers[i].Limit.Mode != ModeShadow {
			n++
		}
	}
	if n == len(d.Layers) {
		return d
	}
	v := d
	v.Layers = make([]LayerResult, 0, n)
	for _, l := range d.Layers {
		if l.Limit.Mode != ModeShadow {
			v.Layers = append(v.Layers, l)
		}
	}
	return v
}

// remainingShare is the fraction of a layer's limit still available; a limit
// of zero or less counts as exhausted so it always binds.
func remainingShare(l *LayerResult) float64 {
	if l.Limit.Limit <= 0 {
		return 0
	}
	return float64(l.Remaining) / float64(l.Limit.Limit)
}

// StampsDecisions reports whether every decision of store carries the
// store's clock reading (Decision.At): true for a store that says so with a
// StampsDecisions method (the memory and Redis stores, failover over two
// such stores) and for one wrapping such a store that exposes it with
// Unwrap. A way in then reads no clock of its own per decision.
func StampsDecisions(store Store) bool {
	switch s := store.(type) {
	case interface{ StampsDecisions() bool }:
		return s.StampsDecisions()
	case interface{ Unwrap() Store }:
		return StampsDecisions(s.Unwrap())
	}
	return false
}
