package enforce

// Binding returns the layer that governs the response headers: when the
// decision was rejected, the rejecting layer with the longest RetryAfter (the
// one the client must actually wait for); otherwise the layer with the least
// Remaining relative to its Limit (the one the client will run into first).
// Ties go to the earlier layer. A decision without layers yields the zero
// LayerResult.
func (d Decision) Binding() LayerResult {
	best := -1
	for i, l := range d.Layers {
		if best < 0 {
			best = i
			continue
		}
		b := d.Layers[best]
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
	if best < 0 {
		return LayerResult{}
	}
	return d.Layers[best]
}

// remainingShare is the fraction of a layer's limit still available; a limit
// of zero or less counts as exhausted so it always binds.
func remainingShare(l LayerResult) float64 {
	if l.Limit.Limit <= 0 {
		return 0
	}
	return float64(l.Remaining) / float64(l.Limit.Limit)
}
