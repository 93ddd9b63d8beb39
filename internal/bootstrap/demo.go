package bootstrap

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
)

// demoPlan and demoLimit mirror the plans and plan_limits rows; they are
// also what the audit log records.
type demoPlan struct {
	Slug        string      `json:"slug"`
	Name        string      `json:"name"`
	Description string      `json:"description"`
	IsDefault   bool        `json:"is_default"`
	IsAnonymous bool        `json:"is_anonymous"`
	Limits      []demoLimit `json:"-"`
}

type demoLimit struct {
	Name      string `json:"name"`
	Route     string `json:"route"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit_count"`
	WindowMS  int64  `json:"window_ms"`
	Burst     int64  `json:"burst"`
	Cost      int    `json:"cost"`
	Mode      string `json:"mode"`
	Period    string `json:"period,omitempty"`
	// Precision is "" for exact, the column's default.
	Precision string `json:"precision,omitempty"`
}

// The sample API's routes, as net/http ServeMux patterns.
const (
	routeSearch  = "GET /api/search"
	routeItem    = "GET /api/items/{id}"
	routeReports = "POST /api/reports"
)

const (
	minute = int64(60_000)
	hour   = 60 * minute
)

// demoPlans shows every algorithm and mode (limit names are per plan: clients
// see "<plan>-<name>", e.g. "pro-search", in RateLimit-Policy): fixed and sliding windows for
// plan-wide quotas, a token bucket for bursty reads, and a leaky bucket that
// queues report jobs instead of rejecting them. Pro's plan-wide limit is
// leased, so a newcomer sees a precision other than exact and its stated
// bound on the plan's page and in the docs.
var demoPlans = []demoPlan{
	{
		Slug: "anonymous", Name: "Anonymous", IsAnonymous: true,
		Description: "Callers without an API key, limited per client IP.",
		Limits: []demoLimit{
			{Name: "global", Algorithm: "fixed_window", Limit: 60, WindowMS: minute},
			{Name: "daily", Algorithm: "quota", Period: "day", Limit: 2000, WindowMS: 24 * hour},
			{Name: "search", Route: routeSearch, Algorithm: "sliding_window_counter", Limit: 10, WindowMS: minute},
			{Name: "items", Route: routeItem, Algorithm: "token_bucket", Limit: 30, WindowMS: minute, Burst: 5},
			{Name: "reports", Route: routeReports, Algorithm: "leaky_bucket", Limit: 2, WindowMS: minute, Burst: 1, Mode: "queue"},
		},
	},
	{
		Slug: "free", Name: "Free", IsDefault: true,
		Description: "The plan every new developer starts on.",
		Limits: []demoLimit{
			{Name: "global", Algorithm: "fixed_window", Limit: 1000, WindowMS: hour},
			{Name: "monthly", Algorithm: "quota", Period: "month", Limit: 100000, WindowMS: 24 * hour},
			{Name: "search", Route: routeSearch, Algorithm: "sliding_window_log", Limit: 30, WindowMS: minute},
			{Name: "items", Route: routeItem, Algorithm: "token_bucket", Limit: 60, WindowMS: minute, Burst: 10},
			{Name: "reports", Route: routeReports, Algorithm: "leaky_bucket", Limit: 6, WindowMS: minute, Burst: 3, Mode: "queue"},
		},
	},
	{
		Slug: "pro", Name: "Pro",
		Description: "Higher limits for production traffic.",
		Limits: []demoLimit{
			{Name: "global", Algorithm: "sliding_window_counter", Limit: 10000, WindowMS: hour, Precision: "leased"},
			{Name: "search", Route: routeSearch, Algorithm: "sliding_window_counter", Limit: 100, WindowMS: minute},
			{Name: "items", Route: routeItem, Algorithm: "token_bucket", Limit: 600, WindowMS: minute, Burst: 50},
			{Name: "reports", Route: routeReports, Algorithm: "leaky_bucket", Limit: 60, WindowMS: minute, Burst: 10, Mode: "queue"},
		},
	},
}

// seedDemo creates the demo plans, but only on an installation where no plan
// exists and bootstrap never created one: plans the operator deleted stay
// deleted after a restart.
func seedDemo(ctx context.Context, tx pgx.Tx) ([]string, error) {
	var seen bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM plans)
		OR EXISTS (SELECT 1 FROM audit_log WHERE actor = $1 AND object_type = 'plan')`, Actor).Scan(&seen)
	if err != nil {
		return nil, fmt.Errorf("look for plans: %w", err)
	}
	if seen {
		return nil, nil
	}
	var created []string
	for i, p := range demoPlans {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO plans (slug, name, description, is_default, is_anonymous)
			VALUES ($1, $2, $3, $4, $5) RETURNING id`,
			p.Slug, p.Name, p.Description, p.IsDefault, p.IsAnonymous).Scan(&id)
		if err != nil {
			return nil, fmt.Errorf("create plan %s: %w", p.Slug, err)
		}
		if err := audit.Record(ctx, tx, Actor, "plan.create", audit.ObjectPlan, strconv.FormatInt(id, 10), nil, p); err != nil {
			return nil, err
		}
		for pos, l := range p.Limits {
			if l.Cost == 0 {
				l.Cost = 1
			}
			if l.Mode == "" {
				l.Mode = "reject"
			}
			precision := l.Precision
			if precision == "" {
				precision = "exact"
			}
			var limitID int64
			err := tx.QueryRow(ctx, `INSERT INTO plan_limits
				(plan_id, name, route, algorithm, limit_count, window_ms, burst, cost, mode, position, period, precision)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id`,
				id, l.Name, l.Route, l.Algorithm, l.Limit, l.WindowMS, l.Burst, l.Cost, l.Mode, pos, l.Period, precision).Scan(&limitID)
			if err != nil {
				return nil, fmt.Errorf("create limit %s: %w", l.Name, err)
			}
			if err := audit.Record(ctx, tx, Actor, "limit.create", audit.ObjectLimit, strconv.FormatInt(limitID, 10), nil,
				struct {
					PlanID int64 `json:"plan_id"`
					demoLimit
				}{id, l}); err != nil {
				return nil, err
			}
		}
		created = append(created, demoPlans[i].Slug)
	}
	return created, nil
}
