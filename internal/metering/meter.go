// Package metering turns the usage history into usage records a billing
// system can take: per developer, plan, tier and period (an hour or a
// day), the admitted requests the tier counted and the cost units they
// spent (its cost per request, as settled after the responses), with an
// idempotent id. A Meter closes each period once the instances' tallies
// have reached Postgres, and reads it again an hour later: requests that reached the
// history late are added by a further record (the next revision), so a
// record is never changed and the records of a period always sum to the
// history's count. A Sender pushes records to a webhook in the shape of a
// billing meter event, signed like the alert webhooks, retried with backoff
// until the receiver takes them; a Reader lists and exports them.
package metering

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// The periods records cover.
const (
	Hour = time.Hour
	Day  = 24 * time.Hour
)

// ErrPeriod is returned by ParsePeriod for anything but "hour" and "day".
var ErrPeriod = errors.New("period must be hour or day")

// ParsePeriod reads "hour" or "day".
func ParsePeriod(s string) (time.Duration, error) {
	switch s {
	case "hour":
		return Hour, nil
	case "day":
		return Day, nil
	}
	return 0, ErrPeriod
}

// Defaults of Options.
const (
	// DefaultGrace is how long after a period ends it is read: longer than
	// the usage history's flush interval, so every instance's tally of
	// the period is in.
	DefaultGrace = 2 * time.Minute
	// DefaultRecheck is when a period is read the second and last time,
	// after its end, for tallies an instance could not flush at once.
	DefaultRecheck = time.Hour
	// DefaultLookback bounds how old a period a Meter still closes (after
	// a stop, say).
	DefaultLookback = 72 * time.Hour
)

// Options configure a Meter; zero fields take the defaults.
type Options struct {
	// Period is Hour or Day (the default).
	Period   time.Duration
	Grace    time.Duration
	Recheck  time.Duration
	Lookback time.Duration
	Logger   *slog.Logger
	// Now is the clock periods close on (time.Now).
	Now func() time.Time
}

// Meter writes usage records from the usage history. Any number of
// instances may run one: a period is closed by one at a time.
type Meter struct {
	pool *pgxpool.Pool
	opts Options
	log  *slog.Logger
	now  func() time.Time
}

// NewMeter returns a meter over pool.
func NewMeter(pool *pgxpool.Pool, opts Options) *Meter {
	opts.Period = cmp.Or(opts.Period, Day)
	opts.Grace = cmp.Or(opts.Grace, DefaultGrace)
	opts.Recheck = cmp.Or(opts.Recheck, DefaultRecheck)
	opts.Lookback = cmp.Or(opts.Lookback, DefaultLookback)
	m := &Meter{pool: pool, opts: opts, log: opts.Logger, now: opts.Now}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m
}

// AllTiers is the tier of the record of every request of a developer on a
// plan, whatever tiers the plan has.
const AllTiers = ""

// RecordID is the idempotent identifier of a record: the same developer,
// plan, tier, period and revision always give the same id, on any instance.
func RecordID(userID int64, plan, tier string, periodStart time.Time, revision int) string {
	h := sha256.Sum256([]byte(strconv.FormatInt(userID, 10) + "\x00" + plan + "\x00" + tier + "\x00" +
		strconv.FormatInt(periodStart.Unix(), 10) + "\x00" + strconv.Itoa(revision)))
	return "sluice_" + hex.EncodeToString(h[:16])
}

// meterLock is the advisory lock key under which a period is closed
// ("sluice-mt" in ASCII).
const meterLock = 0x736c756963656d74

// Run closes due periods every interval until ctx ends. It returns nil.
func (m *Meter) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := m.Close(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("metering: closing periods failed; retried", "err", err)
		} else if n > 0 {
			m.log.Info("metering: usage records written", "records", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type recordKey struct {
	userID     int64
	plan, tier string
}

// counts are a record's figures: admitted and rejected requests, and the
// cost units the admitted ones spent.
type counts struct{ requests, rejected, units int64 }

// Close reads every period that is due, from the oldest: one that ended at
// least Grace ago and was never read, or that was read once and ended at
// least Recheck ago. It writes a record for each developer, plan and tier
// whose count grew since the period's last records, and returns how many.
// While another instance is closing periods it returns 0 at once.
func (m *Meter) Close(ctx context.Context) (int, error) {
	now := m.now()
	written := 0
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, int64(meterLock)).Scan(&locked); err != nil {
			return fmt.Errorf("metering: lock: %w", err)
		}
		if !locked {
			return nil
		}
		checked := map[time.Time]int{}
		rows, err := tx.Query(ctx, `SELECT period_start, checks FROM meter_periods WHERE period_start >= $1`, now.Add(-m.opts.Lookback-m.opts.Period))
		if err != nil {
			return fmt.Errorf("metering: periods: %w", err)
		}
		var (
			start time.Time
			n     int
		)
		if _, err := pgx.ForEachRow(rows, []any{&start, &n}, func() error { checked[start.UTC()] = n; return nil }); err != nil {
			return fmt.Errorf("metering: periods: %w", err)
		}
		tiers, err := m.tiers(ctx, tx)
		if err != nil {
			return err
		}
		last := now.Add(-m.opts.Grace).UTC().Truncate(m.opts.Period) // the first period not yet closable
		for s := now.Add(-m.opts.Lookback).UTC().Truncate(m.opts.Period); s.Before(last); s = s.Add(m.opts.Period) {
			end := s.Add(m.opts.Period)
			switch checked[s] {
			case 0:
			case 1:
				if now.Before(end.Add(m.opts.Recheck)) {
					continue
				}
			default:
				continue
			}
			n, err := m.closePeriod(ctx, tx, s, end, tiers)
			if err != nil {
				return err
			}
			written += n
			if _, err := tx.Exec(ctx, `
INSERT INTO meter_periods (period_start, period_end, checks, checked_at) VALUES ($1, $2, 1, $3)
ON CONFLICT (period_start) DO UPDATE SET checks = meter_periods.checks + 1, checked_at = EXCLUDED.checked_at`, s, end, now); err != nil {
				return fmt.Errorf("metering: period %s: %w", s.Format(time.RFC3339), err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return written, nil
}

// tier is one tier as metering counts it: the routes it applies to, what
// a request costs it, and its policy name (the engine's name for it).
type tier struct {
	name   string
	route  string // "" for every route
	cost   int64
	policy string
}

// tiers are each plan's tiers (shadow tiers left out: they count nothing
// a developer is billed for), by slug.
func (m *Meter) tiers(ctx context.Context, tx pgx.Tx) (map[string][]tier, error) {
	ps, err := plans.LoadAll(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("metering: %w", err)
	}
	out := map[string][]tier{}
	for _, p := range ps {
		for _, l := range p.Limits {
			if l.Mode != enforce.ModeShadow {
				out[p.Slug] = append(out[p.Slug], tier{name: l.Name, route: l.Route, cost: max(l.Cost, 1),
					policy: plans.PolicyName(p.Slug, l.Name)})
			}
		}
	}
	return out, nil
}

const readHistory = `
SELECT user_id, plan, route, sum(admitted)::bigint, sum(rejected)::bigint FROM usage_hours
WHERE hour >= $1 AND hour < $2 AND user_id <> 0
GROUP BY 1, 2, 3`

const readSettled = `
SELECT user_id, plan, tier, sum(units)::bigint FROM usage_tier_units
WHERE hour >= $1 AND hour < $2 GROUP BY 1, 2, 3`

const readRecorded = `
SELECT user_id, plan, tier, sum(requests)::bigint, sum(rejected)::bigint, sum(units)::bigint, max(revision) FROM meter_records
WHERE period_start = $1 GROUP BY 1, 2, 3`

const insertRecords = `
INSERT INTO meter_records (id, user_id, plan, tier, period_start, period_end, revision, requests, rejected, units)
SELECT id, user_id, plan, tier, $1, $2, revision, requests, rejected, units
FROM unnest($3::text[], $4::bigint[], $5::text[], $6::text[], $7::int[], $8::bigint[], $9::bigint[], $10::bigint[])
    AS r(id, user_id, plan, tier, revision, requests, rejected, units)`

// closePeriod writes the records of [start, end) that the history has
// grown by since the period's last records.
func (m *Meter) closePeriod(ctx context.Context, tx pgx.Tx, start, end time.Time, tiers map[string][]tier) (int, error) {
	totals := map[recordKey]counts{}
	rows, err := tx.Query(ctx, readHistory, start, end)
	if err != nil {
		return 0, fmt.Errorf("metering: read history: %w", err)
	}
	var (
		user                    int64
		plan, route             string
		admitted, rejected, rev int64
	)
	_, err = pgx.ForEachRow(rows, []any{&user, &plan, &route, &admitted, &rejected}, func() error {
		add := func(t string, cost int64) {
			k := recordKey{user, plan, t}
			c := totals[k]
			c.requests += admitted
			c.rejected += rejected
			c.units += admitted * cost
			totals[k] = c
		}
		add(AllTiers, 1) // every request, one unit each
		for _, t := range tiers[plan] {
			if t.route == "" || t.route == route {
				add(t.name, t.cost)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("metering: read history: %w", err)
	}
	// What the responses settled: given back (count_when) or charged
	// and given back (cost_header), by the tier's policy name.
	rows, err = tx.Query(ctx, readSettled, start, end)
	if err != nil {
		return 0, fmt.Errorf("metering: read settled units: %w", err)
	}
	var policy string
	var units int64
	_, err = pgx.ForEachRow(rows, []any{&user, &plan, &policy, &units}, func() error {
		for _, t := range tiers[plan] {
			if t.policy == policy {
				k := recordKey{user, plan, t.name}
				c := totals[k]
				c.units += units
				totals[k] = c
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("metering: read settled units: %w", err)
	}
	recorded := map[recordKey]counts{}
	revisions := map[recordKey]int{}
	rows, err = tx.Query(ctx, readRecorded, start)
	if err != nil {
		return 0, fmt.Errorf("metering: read records: %w", err)
	}
	var tierName string
	_, err = pgx.ForEachRow(rows, []any{&user, &plan, &tierName, &admitted, &rejected, &units, &rev}, func() error {
		k := recordKey{user, plan, tierName}
		recorded[k] = counts{admitted, rejected, units}
		revisions[k] = int(rev) + 1
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("metering: read records: %w", err)
	}
	var (
		ids, plansCol, tiersCol []string
		users, reqs, rejs, us   []int64
		revs                    []int32
	)
	for k, c := range totals {
		d := counts{c.requests - recorded[k].requests, c.rejected - recorded[k].rejected, c.units - recorded[k].units}
		if d.requests < 0 || d.rejected < 0 || d.units < 0 || (d.requests == 0 && d.rejected == 0 && d.units == 0) {
			// Nothing new, or less than recorded: the history was pruned
			// under a period still being read; records never go back.
			continue
		}
		r := revisions[k]
		ids = append(ids, RecordID(k.userID, k.plan, k.tier, start, r))
		users, plansCol, tiersCol = append(users, k.userID), append(plansCol, k.plan), append(tiersCol, k.tier)
		revs, reqs, rejs, us = append(revs, int32(r)), append(reqs, d.requests), append(rejs, d.rejected), append(us, d.units)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, insertRecords, start, end, ids, users, plansCol, tiersCol, revs, reqs, rejs, us); err != nil {
		return 0, fmt.Errorf("metering: write records: %w", err)
	}
	return len(ids), nil
}
