package analytics

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// Peeker reads a subject's limits without consuming anything: the
// engine's Store.Peek (later its Decide with Peek set).
type Peeker interface {
	Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error)
}

// Snapshot is the control plane as headroom reads it: *snapshot.Snapshot.
type Snapshot interface {
	Plans() []plans.Plan
	KeyCaller(keyID int64) (enforce.Caller, bool)
}

// TierUse is how much of one limit a caller is using right now.
type TierUse struct {
	// Tier is the policy name ("pro-search"), Route its route ("" for
	// plan-wide).
	Tier, Route string
	Algorithm   enforce.Algorithm
	// Used of Of: requests in the window or period, tokens spent, queue
	// places taken, requests in flight.
	Used, Of int64
}

// Percent is Used as a share of Of, 0 to 100.
func (t TierUse) Percent() int {
	if t.Of <= 0 {
		return 0
	}
	return int(min(max(t.Used, 0)*100/t.Of, 100))
}

// Use is how much of l's capacity its Peek says is taken: Remaining is not
// "limit minus used" for the buckets (an idle token bucket holds its
// burst, an idle leaky bucket its queue depth plus one).
func Use(l enforce.LayerResult) (used, of int64) {
	left := max(l.Remaining, 0)
	switch l.Limit.Algorithm {
	case enforce.TokenBucket:
		of = l.Limit.Burst
		if of == 0 {
			of = l.Limit.Limit
		}
	case enforce.LeakyBucket:
		of = l.Limit.Burst + 1
	default:
		of = l.Limit.Limit
	}
	return of - min(left, of), of
}

// KeyHeadroom is one key's use of each of its limits.
type KeyHeadroom struct {
	Consumer
	Tiers []TierUse
	// Max is the highest Percent of its tiers: how close it runs to a limit.
	Max int
}

// PlanHeadroom is a plan's heaviest keys today and their use of each limit.
type PlanHeadroom struct {
	Plan string
	Keys []KeyHeadroom
}

// Headroom reads how close callers run to their limits: the heaviest keys
// of each plan today (from consumer_days), each peeked through the engine.
type Headroom struct {
	reader  *Reader
	peek    Peeker
	current func() Snapshot
}

// NewHeadroom returns a Headroom reading the rollups through reader, the
// limits through current (nil before the first snapshot) and their state
// through peek.
func NewHeadroom(reader *Reader, peek Peeker, current func() Snapshot) *Headroom {
	return &Headroom{reader: reader, peek: peek, current: current}
}

const heaviestKeys = `
SELECT p.plan, c.key_id, c.user_id, c.requests, c.rejected,
       COALESCE(k.name, 'key ' || c.key_id) || ' (' || COALESCE(u.email, 'developer ' || c.user_id) || ')'
FROM unnest($1::text[]) AS p(plan)
CROSS JOIN LATERAL (
    SELECT key_id, user_id, requests, rejected FROM consumer_days
    WHERE plan = p.plan AND day = $2 AND key_id <> 0
    ORDER BY requests DESC LIMIT $3
) c
LEFT JOIN api_keys k ON k.id = c.key_id
LEFT JOIN users u ON u.id = c.user_id
ORDER BY p.plan, c.requests DESC, c.key_id`

// Heaviest returns, for each of plans that has keyed traffic today (the
// UTC day of now), its perPlan busiest keys of the day and their use of
// each limit right now, busiest first. Shadow limits are left out.
func (h *Headroom) Heaviest(ctx context.Context, now time.Time, plans []string, perPlan int) ([]PlanHeadroom, error) {
	snap := h.current()
	if snap == nil || len(plans) == 0 {
		return nil, nil
	}
	rows, err := h.reader.pool.Query(ctx, heaviestKeys, plans, now.UTC().Truncate(24*time.Hour), max(perPlan, 1))
	if err != nil {
		return nil, fmt.Errorf("analytics: heaviest keys: %w", err)
	}
	var (
		out  []PlanHeadroom
		plan string
		c    Consumer
	)
	_, err = pgx.ForEachRow(rows, []any{&plan, &c.KeyID, &c.UserID, &c.Requests, &c.Rejected, &c.Label}, func() error {
		if len(out) == 0 || out[len(out)-1].Plan != plan {
			out = append(out, PlanHeadroom{Plan: plan})
		}
		c.Plan = plan
		last := &out[len(out)-1]
		last.Keys = append(last.Keys, KeyHeadroom{Consumer: c})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("analytics: heaviest keys: %w", err)
	}
	for i := range out {
		for j := range out[i].Keys {
			k := &out[i].Keys[j]
			if err := h.peekKey(ctx, snap, k); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Keys returns the use of each limit of the given keys right now, in
// their order; keys the snapshot no longer holds (revoked, expired) are
// left out.
func (h *Headroom) Keys(ctx context.Context, keys []Consumer) ([]KeyHeadroom, error) {
	snap := h.current()
	if snap == nil {
		return nil, nil
	}
	var out []KeyHeadroom
	for _, c := range keys {
		k := KeyHeadroom{Consumer: c}
		if err := h.peekKey(ctx, snap, &k); err != nil {
			return nil, err
		}
		if k.Tiers != nil {
			out = append(out, k)
		}
	}
	return out, nil
}

// peekKey fills k's tiers from one Peek of all its limits.
func (h *Headroom) peekKey(ctx context.Context, snap Snapshot, k *KeyHeadroom) error {
	caller, ok := snap.KeyCaller(k.KeyID)
	if !ok {
		return nil
	}
	var limits []enforce.Limit
	for _, l := range caller.Limits {
		if l.Mode != enforce.ModeShadow {
			limits = append(limits, l)
		}
	}
	if len(limits) == 0 {
		k.Tiers = []TierUse{}
		return nil
	}
	d, err := h.peek.Peek(ctx, enforce.Request{Subject: caller.Subject, Key: caller.Key, Limits: limits, Anchor: caller.Anchor})
	if err != nil {
		return fmt.Errorf("analytics: peek key %d: %w", k.KeyID, err)
	}
	k.Tiers = make([]TierUse, 0, len(d.Layers))
	for _, l := range d.Layers {
		used, of := Use(l)
		t := TierUse{Tier: l.Limit.Name, Route: l.Limit.Route, Algorithm: l.Limit.Algorithm, Used: used, Of: of}
		k.Tiers = append(k.Tiers, t)
		k.Max = max(k.Max, t.Percent())
	}
	return nil
}

// NearLimitPercent is the use from which a subject counts as near a limit
// in sluice_tier_near_limit_subjects.
const NearLimitPercent = 80

// DefaultGaugeKeys is how many of each plan's busiest keys of the day
// TierGauges peeks.
const DefaultGaugeKeys = 20

// TierGauges keeps the per-tier gauges: sluice_tier_limit{plan,tier},
// sluice_tier_used{plan,tier} (the heaviest checked key's use of the tier
// now) and sluice_tier_near_limit_subjects{plan,tier} (checked keys at
// NearLimitPercent or more). The keys checked are each plan's busiest of
// the UTC day, at most Keys; the labels are the plan's slug and the
// tier's name, never a key, so their number is the tiers'.
type TierGauges struct {
	headroom *Headroom
	keys     int
	log      *slog.Logger
	now      func() time.Time

	limit, used, near *prometheus.GaugeVec
}

// NewTierGauges returns the gauges, registered on reg, refreshed from
// headroom's busiest keys (keys per plan; 0 means DefaultGaugeKeys).
func NewTierGauges(headroom *Headroom, keys int, reg prometheus.Registerer, logger *slog.Logger) *TierGauges {
	if keys <= 0 {
		keys = DefaultGaugeKeys
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &TierGauges{headroom: headroom, keys: keys, log: logger, now: time.Now,
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_tier_limit",
			Help: "A tier's limit: requests per window or period, tokens of a bucket's burst, places of a leaky bucket, requests in flight.",
		}, []string{"plan", "tier"}),
		used: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_tier_used",
			Help: "How much of the tier the heaviest of the plan's busiest keys of the day is using now, in the units of sluice_tier_limit.",
		}, []string{"plan", "tier"}),
		near: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_tier_near_limit_subjects",
			Help: "How many of the plan's busiest keys of the day are using 80 % or more of the tier now.",
		}, []string{"plan", "tier"}),
	}
	if reg != nil {
		reg.MustRegister(g.limit, g.used, g.near)
	}
	return g
}

// Refresh recomputes every gauge once.
func (g *TierGauges) Refresh(ctx context.Context) error {
	snap := g.headroom.current()
	if snap == nil {
		return nil
	}
	type labels struct{ plan, tier string }
	type value struct {
		limit, used float64
		near        int
	}
	values := map[labels]*value{}
	var slugs []string
	for _, p := range snap.Plans() {
		slugs = append(slugs, p.Slug)
		for _, l := range p.Limits {
			if l.Mode == enforce.ModeShadow {
				continue
			}
			lim := l.Enforce(p.Slug)
			_, of := Use(enforce.LayerResult{Limit: lim})
			values[labels{p.Slug, l.Name}] = &value{limit: float64(of)}
		}
	}
	heavy, err := g.headroom.Heaviest(ctx, g.now(), slugs, g.keys)
	if err != nil {
		return err
	}
	for _, ph := range heavy {
		for _, k := range ph.Keys {
			for _, t := range k.Tiers {
				v, ok := values[labels{ph.Plan, strings.TrimPrefix(t.Tier, ph.Plan+"-")}]
				if !ok {
					continue // a key's own override, not a tier of the plan
				}
				v.used = max(v.used, float64(t.Used))
				if t.Percent() >= NearLimitPercent {
					v.near++
				}
			}
		}
	}
	g.limit.Reset()
	g.used.Reset()
	g.near.Reset()
	for l, v := range values {
		g.limit.WithLabelValues(l.plan, l.tier).Set(v.limit)
		g.used.WithLabelValues(l.plan, l.tier).Set(v.used)
		g.near.WithLabelValues(l.plan, l.tier).Set(float64(v.near))
	}
	return nil
}

// Run refreshes the gauges every interval until ctx ends. It returns nil.
func (g *TierGauges) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := g.Refresh(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("tier gauges", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
