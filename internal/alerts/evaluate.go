package alerts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// DefaultInterval is how often the Evaluator reads usage.
const DefaultInterval = 5 * time.Second

// paceMinUsedPercent is how much of a quota must be used before the pace
// warning may fire: the projection from a handful of requests early in a
// period would cry wolf.
const paceMinUsedPercent = 10

// maxKeysPerDeveloper bounds the keys evaluated per developer per round.
const maxKeysPerDeveloper = 100

// Retention: a firing is kept until its period has ended (and an hour
// more, for clocks that disagree); finished deliveries and their attempts
// for deliveryRetention. Pruning runs at most every pruneEvery.
const (
	deliveryRetention = 30 * 24 * time.Hour
	pruneEvery        = time.Minute
)

// EvaluatorOptions configures NewEvaluator.
type EvaluatorOptions struct {
	// Store is the engine to Peek (the dashboards' store: off the request
	// path's pipeline). Required.
	Store enforce.Store
	// Interval between rounds; 0 means DefaultInterval.
	Interval time.Duration
	// Email sends alerts by email too (rules permitting); false when the
	// portal has no SMTP.
	Email  bool
	Logger *slog.Logger
	// Now is the clock for decisions whose store does not say its time;
	// nil means time.Now.
	Now func() time.Time
	// Wake, when set, is called after a round enqueued deliveries (the
	// Worker's Wake), so they go out without waiting for its next poll.
	Wake func()
}

// Evaluator reads the usage of developers who have alert rules and records
// each threshold crossing once per period, enqueueing its deliveries.
type Evaluator struct {
	pool *pgxpool.Pool
	opts EvaluatorOptions
	log  *slog.Logger
	now  func() time.Time
	// pruned is when this evaluator last pruned (Evaluate runs in one
	// goroutine at a time per evaluator; Run never overlaps rounds).
	pruned time.Time
}

// NewEvaluator returns an Evaluator over pool.
func NewEvaluator(pool *pgxpool.Pool, opts EvaluatorOptions) *Evaluator {
	if opts.Store == nil {
		panic("alerts.NewEvaluator: Store is required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	e := &Evaluator{pool: pool, opts: opts, log: opts.Logger, now: opts.Now}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	return e
}

// Run evaluates every Interval until ctx ends.
func (e *Evaluator) Run(ctx context.Context) error {
	t := time.NewTicker(e.opts.Interval)
	defer t.Stop()
	for {
		if _, err := e.Evaluate(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("alert evaluation", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ruleRow is a rule with its developer's address.
type ruleRow struct {
	Rule
	Address string `db:"address"`
}

const selectActiveRules = `
SELECT r.id, r.user_id, r.key_id, r.thresholds, r.pace, r.email, r.updated_at, u.email AS address
FROM alert_rules r JOIN users u ON u.id = r.user_id
WHERE u.role = 'developer' AND u.disabled_at IS NULL
ORDER BY r.user_id, r.key_id NULLS FIRST`

// watchedKey is an active key of a developer who has rules, with what its
// limits and quotas are computed from.
type watchedKey struct {
	KeyID     int64              `db:"key_id"`
	UserID    int64              `db:"user_id"`
	PlanSlug  string             `db:"plan_slug"`
	Overrides []plans.LimitInput `db:"overrides"`
	Anchor    time.Time          `db:"anchor"`
}

// One query for every watched key: the plan that applies to a key is its
// own, else its owner's, else the default (as apikeys reads it), and its
// quotas renew at the owner's billing anchor, else their sign-up (as
// billing reads it). A round then reads Postgres a fixed few times
// whatever the number of developers (measured: BenchmarkEvaluateRound).
const selectWatchedKeys = `
SELECT k.id AS key_id, k.user_id, COALESCE(kp.slug, up.slug, dp.slug, '') AS plan_slug, k.overrides,
       COALESCE(u.billing_anchor, u.created_at) AS anchor
FROM api_keys k
JOIN users u ON u.id = k.user_id
LEFT JOIN plans kp ON kp.id = k.plan_id
LEFT JOIN plans up ON up.id = u.plan_id
LEFT JOIN plans dp ON dp.is_default
WHERE k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
  AND u.role = 'developer' AND u.disabled_at IS NULL
  AND k.user_id IN (SELECT user_id FROM alert_rules)
ORDER BY k.user_id, k.id`

// Evaluate runs one round and returns how many crossings this call fired
// (claimed first); a crossing another instance claimed is not counted.
func (e *Evaluator) Evaluate(ctx context.Context) (int, error) {
	rows, err := e.pool.Query(ctx, selectActiveRules)
	if err != nil {
		return 0, fmt.Errorf("alerts: read rules: %w", err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByName[ruleRow])
	if err != nil {
		return 0, fmt.Errorf("alerts: read rules: %w", err)
	}
	fired := 0
	var errs []error
	if len(all) > 0 {
		fired, errs = e.evaluateKeys(ctx, all)
	}
	if fired > 0 && e.opts.Wake != nil {
		e.opts.Wake()
	}
	if now := e.now(); now.Sub(e.pruned) >= pruneEvery {
		if err := e.prune(ctx); err != nil {
			errs = append(errs, err)
		} else {
			e.pruned = now
		}
	}
	if ctx.Err() != nil {
		return fired, ctx.Err()
	}
	return fired, errors.Join(errs...)
}

// evaluateKeys peeks every active key of the developers with rules, under
// the rule that applies to it (the key's, else the account's). A key that
// fails is reported and the others still evaluated.
func (e *Evaluator) evaluateKeys(ctx context.Context, rules []ruleRow) (int, []error) {
	account := map[int64]*ruleRow{}
	byKey := map[int64]*ruleRow{}
	for i := range rules {
		if rules[i].KeyID == nil {
			account[rules[i].UserID] = &rules[i]
		} else {
			byKey[*rules[i].KeyID] = &rules[i]
		}
	}
	rows, err := e.pool.Query(ctx, selectWatchedKeys)
	if err != nil {
		return 0, []error{fmt.Errorf("alerts: read keys: %w", err)}
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[watchedKey])
	if err != nil {
		return 0, []error{fmt.Errorf("alerts: read keys: %w", err)}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	all, err := plans.LoadAll(ctx, e.pool)
	if err != nil {
		return 0, []error{fmt.Errorf("alerts: read plans: %w", err)}
	}
	base := make(map[string][]enforce.Limit, len(all))
	for _, p := range all {
		base[p.Slug] = p.EnforceLimits()
	}
	fired := 0
	var errs []error
	perDeveloper := map[int64]int{}
	for _, k := range keys {
		if ctx.Err() != nil {
			return fired, append(errs, ctx.Err())
		}
		rule := byKey[k.KeyID]
		if rule == nil {
			rule = account[k.UserID]
		}
		if rule == nil || perDeveloper[k.UserID] >= maxKeysPerDeveloper {
			continue
		}
		perDeveloper[k.UserID]++
		limits := plans.ApplyOverrides(k.PlanSlug, base[k.PlanSlug], k.Overrides)
		if len(limits) == 0 {
			continue
		}
		n, err := e.evaluateKey(ctx, k, limits, rule)
		fired += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return fired, errs
}

// evaluateKey peeks one key's limits and fires what they cross.
func (e *Evaluator) evaluateKey(ctx context.Context, k watchedKey, limits []enforce.Limit, rule *ruleRow) (int, error) {
	subject, scope := enforce.DeveloperSubject(k.UserID), enforce.KeyScope(k.KeyID)
	d, err := e.opts.Store.Peek(ctx, enforce.Request{Subject: subject, Key: scope, Limits: limits, Anchor: k.Anchor})
	if err != nil {
		return 0, fmt.Errorf("alerts: peek key %d: %w", k.KeyID, err)
	}
	at := d.At
	if at.IsZero() {
		at = e.now()
	}
	fired := 0
	for _, l := range d.Visible().Layers {
		for _, c := range crossings(l, at, rule.Rule) {
			c.subject = subject
			if l.Limit.PerKey {
				c.subject += "/" + scope
				c.event.KeyID = &k.KeyID
			}
			c.event.DeveloperID = k.UserID
			ok, err := e.fire(ctx, c, rule)
			if err != nil {
				return fired, err
			}
			if ok {
				fired++
			}
		}
	}
	return fired, nil
}

// crossing is one threshold a layer is past, with the event to send.
type crossing struct {
	subject   string
	threshold string
	periodEnd time.Time
	event     Event
}

// capacity is what a layer holds when unused, as the usage page's gauges
// read it: a token bucket its burst, a leaky bucket its queue plus the
// request in service, any other limit its limit.
func capacity(l enforce.Limit) int64 {
	switch l.Algorithm {
	case enforce.TokenBucket:
		if l.Burst > 0 {
			return l.Burst
		}
		return l.Limit
	case enforce.LeakyBucket:
		return l.Burst + 1
	default:
		return l.Limit
	}
}

// crossings lists the thresholds of rule that layer l is past at time at.
// The period a crossing belongs to is a quota's current period, or the
// limit's window counted from the Unix epoch for every rate limit (a rolling
// window has no period of its own: this fires at most once per window
// length). Limits without a window (requests in flight) are left out.
func crossings(l enforce.LayerResult, at time.Time, rule Rule) []crossing {
	lim := l.Limit
	var start, resets time.Time
	var length, elapsed time.Duration
	resets = at.Add(l.ResetAfter).UTC().Truncate(time.Second)
	switch {
	case lim.Algorithm == enforce.Quota && l.Period > 0:
		length, elapsed = l.Period, l.Period-l.ResetAfter
		// Rounded, the start names the period the same way in every
		// round whatever the store's sub-second timing.
		start = at.Add(-elapsed).UTC().Round(time.Second)
	case lim.Window > 0:
		length = lim.Window
		w := lim.Window.Microseconds()
		start = time.UnixMicro(at.UnixMicro() / w * w).UTC()
	default:
		return nil
	}
	of := capacity(lim)
	if of <= 0 {
		return nil
	}
	used := of - min(max(l.Remaining, 0), of)
	pct := used * 100 / of
	base := Event{
		CreatedAt: at.UTC(),
		Limit: &EventLimit{Policy: lim.Name, Route: lim.Route, Algorithm: string(lim.Algorithm), Limit: lim.Limit,
			WindowSeconds: int64((length + time.Second - 1) / time.Second), Period: string(lim.Period)},
		Used: used, Capacity: of, UsedPercent: pct, PeriodStart: start, ResetsAt: resets,
	}
	var out []crossing
	for _, t := range rule.Thresholds {
		if used*100 < int64(t)*of {
			continue
		}
		ev := base
		ev.ID, ev.Type, ev.ThresholdPercent = newEventID(), EventThreshold, int(t)
		ev.Message = fmt.Sprintf("You have used %d%% of %s (%d of %d); it resets at %s.",
			pct, lim.Name, used, of, resets.Format(time.RFC3339))
		out = append(out, crossing{threshold: "pct:" + strconv.Itoa(int(t)), periodEnd: start.Add(length), event: ev})
	}
	if rule.Pace && lim.Algorithm == enforce.Quota && l.Period > 0 && used < of && used*100 >= paceMinUsedPercent*of {
		if elapsed > 0 {
			projected := int64(float64(used) * float64(l.Period) / float64(elapsed))
			if projected > of {
				ev := base
				ev.ID, ev.Type, ev.ProjectedUse = newEventID(), EventPace, projected
				ev.Message = fmt.Sprintf("At this pace %s runs out before it renews at %s: %d of %d used, about %d by the renewal.",
					lim.Name, resets.Format(time.RFC3339), used, of, projected)
				out = append(out, crossing{threshold: "pace", periodEnd: start.Add(length), event: ev})
			}
		}
	}
	return out
}

// fire claims a crossing and, if this call claimed it, enqueues its
// deliveries in the same transaction: a crash between the two loses
// neither, and a second instance's insert finds the row and sends nothing.
func (e *Evaluator) fire(ctx context.Context, c crossing, rule *ruleRow) (bool, error) {
	body, err := json.Marshal(c.event)
	if err != nil {
		return false, err
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("alerts: fire: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, `
INSERT INTO alert_firings (subject, limit_name, threshold, period_start, period_end) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING`, c.subject, c.event.Limit.Policy, c.threshold, c.event.PeriodStart, c.periodEnd)
	if err != nil {
		return false, fmt.Errorf("alerts: claim crossing: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if _, err := tx.Exec(ctx, `
INSERT INTO alert_deliveries (user_id, webhook_id, event_type, payload)
SELECT $1, id, $2, $3 FROM alert_webhooks WHERE user_id = $1`, rule.UserID, c.event.Type, body); err != nil {
		return false, fmt.Errorf("alerts: queue webhooks: %w", err)
	}
	if e.opts.Email && rule.Email {
		if _, err := tx.Exec(ctx, `
INSERT INTO alert_deliveries (user_id, email_to, event_type, payload) VALUES ($1, $2, $3, $4)`,
			rule.UserID, rule.Address, c.event.Type, body); err != nil {
			return false, fmt.Errorf("alerts: queue email: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("alerts: fire: %w", err)
	}
	e.log.Info("alert fired", "user_id", rule.UserID, "limit", c.event.Limit.Policy, "threshold", c.threshold)
	return true, nil
}

// prune deletes firings whose period is over and old finished deliveries,
// so the tables stay the size of what can still matter.
func (e *Evaluator) prune(ctx context.Context) error {
	if _, err := e.pool.Exec(ctx, `DELETE FROM alert_firings WHERE period_end < now() - interval '1 hour'`); err != nil {
		return fmt.Errorf("alerts: prune firings: %w", err)
	}
	if _, err := e.pool.Exec(ctx, `
DELETE FROM alert_deliveries WHERE state <> 'pending' AND created_at < now() - make_interval(secs => $1)`,
		deliveryRetention.Seconds()); err != nil {
		return fmt.Errorf("alerts: prune deliveries: %w", err)
	}
	return nil
}
