package httplimit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Span names and attributes of a traced decision (Options.Tracer). No
// attribute ever holds a key's secret, a subject or a client address: a
// caller is its key id, developer id and plan.
const (
	// SpanDecision is a decision's span: the caller identified, its
	// limits decided, before the handler runs.
	SpanDecision = "sluice.decision"
	// SpanStore is its child: the store's (or, for Check, the engine's)
	// part of the decision.
	SpanStore = "sluice.store"
	// EventLayer is an event of the decision's span per layer decided.
	EventLayer = "sluice.layer"
)

// Attribute keys of the decision's span and its layer events.
const (
	AttrWayIn       = attribute.Key("sluice.way_in")
	AttrRoute       = attribute.Key("sluice.route")
	AttrPlan        = attribute.Key("sluice.plan")
	AttrKeyID       = attribute.Key("sluice.key_id")
	AttrDeveloperID = attribute.Key("sluice.developer_id")
	AttrAllowed     = attribute.Key("sluice.allowed")
	AttrLayers      = attribute.Key("sluice.layers")
	AttrLimit       = attribute.Key("sluice.limit")
	AttrRemaining   = attribute.Key("sluice.remaining")
	AttrRetryAfter  = attribute.Key("sluice.retry_after_ms")
	AttrDegraded    = attribute.Key("sluice.degraded")
)

// traceDecision starts the decision's span of caller on route, when the
// middleware traces; span is nil otherwise, and endDecision and the store
// span then do nothing.
func (m *Middleware) traceDecision(ctx context.Context, caller enforce.Caller, route string) (context.Context, trace.Span) {
	if m.tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{AttrWayIn.String(m.wayIn), AttrRoute.String(route), AttrPlan.String(caller.Plan)}
	if caller.KeyID != 0 {
		attrs = append(attrs, AttrKeyID.Int64(caller.KeyID), AttrDeveloperID.Int64(caller.UserID))
	}
	return m.tracer.Start(ctx, SpanDecision, trace.WithAttributes(attrs...))
}

// endDecision records d (or err) on span and ends it.
func endDecision(span trace.Span, d enforce.Decision, degraded enforce.Degradation, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "rate-limit decision failed")
		span.End()
		return
	}
	span.SetAttributes(AttrAllowed.Bool(d.Allowed), AttrLayers.Int(len(d.Layers)))
	if degraded != enforce.NotDegraded {
		span.SetAttributes(AttrDegraded.String(string(degraded)))
	}
	for i := range d.Layers {
		l := &d.Layers[i]
		span.AddEvent(EventLayer, trace.WithAttributes(AttrLimit.String(l.Limit.Name), AttrAllowed.Bool(l.Allowed),
			AttrRemaining.Int64(l.Remaining), AttrRetryAfter.Int64(l.RetryAfter.Milliseconds())))
	}
	span.End()
}

// traceStore starts the store's span under the decision's, when traced.
func (m *Middleware) traceStore(ctx context.Context, decision trace.Span) (context.Context, trace.Span) {
	if decision == nil {
		return ctx, nil
	}
	return m.tracer.Start(ctx, SpanStore)
}

// endStore ends the store's span, recording err.
func endStore(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "store call failed")
	}
	span.End()
}

// degradationOf is the degradation a store's decision carries.
func degradationOf(d enforce.Decision) enforce.Degradation {
	switch {
	case d.Local:
		return enforce.DegradedLocal
	case d.RegionShare:
		return enforce.DegradedRegionShare
	}
	return enforce.NotDegraded
}
