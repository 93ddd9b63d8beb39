package history

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// unitsKey is one row of usage_tier_units: a developer's settlements on
// one tier (its policy name) in one hour.
type unitsKey struct {
	hour   int64 // unix hours
	userID int64
	plan   string
	tier   string
}

// settled is the tally of settlements, apart from the decisions' tally:
// it is filled after responses, never on a decision's path.
type settled struct {
	mu      sync.Mutex
	units   map[unitsKey]int64
	pending map[unitsKey]int64 // under the recorder's flushMu
}

const upsertTierUnits = `
INSERT INTO usage_tier_units (hour, user_id, plan, tier, units)
SELECT * FROM unnest($1::timestamptz[], $2::bigint[], $3::text[], $4::text[], $5::bigint[])
ON CONFLICT (hour, user_id, plan, tier) DO UPDATE SET units = usage_tier_units.units + EXCLUDED.units`

// RecordSettled tallies units (negative when given back) that the response
// of a request of caller settled on the limit named tier (its policy
// name), for metering; anonymous callers are not metered. It implements
// httplimit.SettleRecorder and never blocks on I/O.
func (r *Recorder) RecordSettled(caller enforce.Caller, tier string, units int64) {
	if caller.UserID == 0 || units == 0 {
		return
	}
	k := unitsKey{hour: r.now().Unix() / 3600, userID: caller.UserID, plan: caller.Plan, tier: tier}
	s := &r.settled
	s.mu.Lock()
	if s.units == nil {
		s.units = map[unitsKey]int64{}
	}
	s.units[k] += units
	s.mu.Unlock()
}

// flushSettled adds the settlements tallied so far to Postgres; on failure
// they stay pending (within MaxPending rows) for the next flush. Called
// under flushMu.
func (r *Recorder) flushSettled(ctx context.Context) error {
	s := &r.settled
	s.mu.Lock()
	batch := s.units
	s.units = nil
	s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[unitsKey]int64{}
	}
	for k, v := range batch {
		if _, ok := s.pending[k]; !ok && len(s.pending) >= r.opts.MaxPending {
			r.log.Warn("usage history: settled units dropped while Postgres is unreachable", "units", v)
			continue
		}
		s.pending[k] += v
	}
	if len(s.pending) == 0 {
		return nil
	}
	keys := make([]unitsKey, 0, len(s.pending))
	for k := range s.pending {
		keys = append(keys, k)
	}
	// In one order, so that two instances adding to the same rows lock
	// them alike (no deadlock).
	slices.SortFunc(keys, func(a, b unitsKey) int {
		if c := a.hour - b.hour; c != 0 {
			return int(c)
		}
		if c := a.userID - b.userID; c != 0 {
			return int(c)
		}
		if c := strings.Compare(a.plan, b.plan); c != 0 {
			return c
		}
		return strings.Compare(a.tier, b.tier)
	})
	var (
		at          []time.Time
		users, vals []int64
		ps, tiers   []string
	)
	for _, k := range keys {
		at = append(at, time.Unix(k.hour*3600, 0).UTC())
		users, ps, tiers, vals = append(users, k.userID), append(ps, k.plan), append(tiers, k.tier), append(vals, s.pending[k])
	}
	if _, err := r.pool.Exec(ctx, upsertTierUnits, at, users, ps, tiers, vals); err != nil {
		return fmt.Errorf("usage history: add settled units: %w", err)
	}
	clear(s.pending)
	return nil
}
