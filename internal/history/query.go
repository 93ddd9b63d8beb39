package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Resolution is the width of a history bucket.
type Resolution string

// The two resolutions: minutes (kept MinuteRetention), hours (kept
// HourRetention).
const (
	Minute Resolution = "minute"
	Hour   Resolution = "hour"
)

// Span is how long a bucket of r lasts.
func (r Resolution) Span() time.Duration {
	if r == Hour {
		return time.Hour
	}
	return time.Minute
}

// Retention is how long buckets of r are kept.
func (r Resolution) Retention() time.Duration {
	if r == Hour {
		return HourRetention
	}
	return MinuteRetention
}

// ErrResolution is returned for a resolution other than Minute and Hour.
var ErrResolution = errors.New("resolution must be minute or hour")

// ParseResolution reads "minute" or "hour" ("" is Minute).
func ParseResolution(s string) (Resolution, error) {
	switch Resolution(s) {
	case "", Minute:
		return Minute, nil
	case Hour:
		return Hour, nil
	}
	return "", ErrResolution
}

// Filter selects history rows; its zero value selects everything. Fields
// that are set must all match.
type Filter struct {
	Plan   string
	Route  string
	UserID int64
	KeyID  int64
	// Anonymous selects callers without a key only.
	Anonymous bool
}

// where is the filter as SQL conditions on $3.. (after the time range's
// $1 and $2).
func (f Filter) where() (string, []any) {
	sql := ""
	args := []any{}
	add := func(cond string, v any) {
		args = append(args, v)
		sql += fmt.Sprintf(" AND %s = $%d", cond, len(args)+2)
	}
	if f.Plan != "" {
		add("h.plan", f.Plan)
	}
	if f.Route != "" {
		add("h.route", f.Route)
	}
	if f.UserID != 0 {
		add("h.user_id", f.UserID)
	}
	if f.KeyID != 0 {
		add("h.key_id", f.KeyID)
	}
	if f.Anonymous {
		sql += " AND h.key_id = 0 AND h.user_id = 0"
	}
	return sql, args
}

// table is the table and time column of a resolution.
func (r Resolution) table() (table, at string) {
	if r == Hour {
		return "usage_hours", "hour"
	}
	return "usage_minutes", "minute"
}

// Point is one bucket of a series.
type Point struct {
	At       time.Time
	Admitted int64
	Rejected int64
}

// Reader reads the history.
type Reader struct{ pool *pgxpool.Pool }

// NewReader returns a reader over pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

// Series returns f's traffic per bucket of res in [from, to), every bucket
// present (zero without traffic), from truncated to a bucket.
func (q *Reader) Series(ctx context.Context, f Filter, res Resolution, from, to time.Time) ([]Point, error) {
	span := res.Span()
	from = from.UTC().Truncate(span)
	n := int(to.Sub(from) / span)
	if to.Sub(from)%span != 0 {
		n++
	}
	if n <= 0 {
		return nil, nil
	}
	table, at := res.table()
	cond, args := f.where()
	sql := fmt.Sprintf(`SELECT h.%[2]s, sum(h.admitted)::bigint, sum(h.rejected)::bigint
FROM %[1]s h WHERE h.%[2]s >= $1 AND h.%[2]s < $2%[3]s GROUP BY h.%[2]s`, table, at, cond)
	rows, err := q.pool.Query(ctx, sql, append([]any{from, to}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("usage history series: %w", err)
	}
	points := make([]Point, n)
	for i := range points {
		points[i].At = from.Add(time.Duration(i) * span)
	}
	var (
		t    time.Time
		a, r int64
	)
	_, err = pgx.ForEachRow(rows, []any{&t, &a, &r}, func() error {
		if i := int(t.Sub(from) / span); i >= 0 && i < n {
			points[i].Admitted += a
			points[i].Rejected += r
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("usage history series: %w", err)
	}
	return points, nil
}

// Row is one stored history row, with the names a person reads.
type Row struct {
	At       time.Time
	Plan     string
	Route    string
	KeyID    int64
	KeyName  string // "" when the key is gone, or for anonymous rows
	UserID   int64
	Email    string
	Address  string // the anonymous address block, else ""
	Admitted int64
	Rejected int64
}

// MaxRows bounds one EachRow answer (a CSV download).
const MaxRows = 1_000_000

// EachRow calls fn with each of f's stored rows of res in [from, to),
// oldest first, at most MaxRows, as they are read (a download of 90 days
// is never held in memory whole). An error from fn stops the reading and
// is returned.
func (q *Reader) EachRow(ctx context.Context, f Filter, res Resolution, from, to time.Time, fn func(Row) error) error {
	table, at := res.table()
	cond, args := f.where()
	sql := fmt.Sprintf(`SELECT h.%[2]s, h.plan, h.route, h.key_id, COALESCE(k.name, ''),
       h.user_id, COALESCE(u.email, ''), h.address, h.admitted, h.rejected
FROM %[1]s h
LEFT JOIN api_keys k ON k.id = h.key_id
LEFT JOIN users u ON u.id = h.user_id
WHERE h.%[2]s >= $1 AND h.%[2]s < $2%[3]s
ORDER BY h.%[2]s, h.plan, h.route, h.user_id, h.key_id, h.address
LIMIT %[4]d`, table, at, cond, MaxRows)
	rows, err := q.pool.Query(ctx, sql, append([]any{from, to}, args...)...)
	if err != nil {
		return fmt.Errorf("usage history rows: %w", err)
	}
	var r Row
	_, err = pgx.ForEachRow(rows, []any{&r.At, &r.Plan, &r.Route, &r.KeyID, &r.KeyName, &r.UserID, &r.Email, &r.Address, &r.Admitted, &r.Rejected},
		func() error { return fn(r) })
	if err != nil {
		return fmt.Errorf("usage history rows: %w", err)
	}
	return nil
}

// Breakdown is the traffic of one value of a dimension over a range.
type Breakdown struct {
	Label string `db:"label"`
	// Value is what a Filter field takes to select this group: the plan's
	// slug, the route, the developer's or key's id ("" for anonymous and
	// for address blocks).
	Value    string `db:"value"`
	Admitted int64  `db:"admitted"`
	Rejected int64  `db:"rejected"`
}

// Dimension names what a Top breakdown groups by.
type Dimension string

// The dimensions of Top.
const (
	ByPlan      Dimension = "plan"
	ByRoute     Dimension = "route"
	ByDeveloper Dimension = "developer"
	ByKey       Dimension = "key"
	ByAddress   Dimension = "address"
)

// Top returns f's traffic of res in [from, to) grouped by dim, busiest
// first, at most limit groups. Developers and keys are labelled with the
// email and the key's name; anonymous rows group as "anonymous".
func (q *Reader) Top(ctx context.Context, f Filter, dim Dimension, res Resolution, from, to time.Time, limit int) ([]Breakdown, error) {
	var label, value string
	switch dim {
	case ByPlan:
		label, value = "h.plan", "h.plan"
	case ByRoute:
		label, value = "CASE WHEN h.route = '' THEN '(no route)' ELSE h.route END", "h.route"
	case ByDeveloper:
		label = "CASE WHEN h.user_id = 0 THEN 'anonymous' ELSE COALESCE(u.email, 'developer ' || h.user_id) END"
		value = "CASE WHEN h.user_id = 0 THEN '' ELSE h.user_id::text END"
	case ByKey:
		label = "CASE WHEN h.key_id = 0 THEN 'anonymous' ELSE COALESCE(k.name || ' (' || u.email || ')', 'key ' || h.key_id) END"
		value = "CASE WHEN h.key_id = 0 THEN '' ELSE h.key_id::text END"
	case ByAddress:
		label, value = "CASE WHEN h.address = '' THEN 'other addresses' ELSE h.address END", "''"
	default:
		return nil, fmt.Errorf("usage history: unknown dimension %q", dim)
	}
	table, at := res.table()
	if dim == ByAddress {
		// Address blocks are anonymous traffic's: keyed requests record
		// no address and are not "other addresses".
		f.Anonymous = true
	}
	cond, args := f.where()
	sql := fmt.Sprintf(`SELECT %[4]s AS label, %[6]s AS value, sum(h.admitted)::bigint AS admitted, sum(h.rejected)::bigint AS rejected
FROM %[1]s h
LEFT JOIN api_keys k ON k.id = h.key_id
LEFT JOIN users u ON u.id = h.user_id
WHERE h.%[2]s >= $1 AND h.%[2]s < $2%[3]s
GROUP BY 1, 2 ORDER BY sum(h.admitted + h.rejected) DESC, 1 LIMIT %[5]d`, table, at, cond, label, max(limit, 1), value)
	rows, err := q.pool.Query(ctx, sql, append([]any{from, to}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("usage history breakdown: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Breakdown])
	if err != nil {
		return nil, fmt.Errorf("usage history breakdown: %w", err)
	}
	return out, nil
}

// ShadowRow is who one shadow tier would have rejected, and how often.
type ShadowRow struct {
	Tier    string `db:"tier"`
	UserID  int64  `db:"user_id"`
	Email   string `db:"email"`
	KeyID   int64  `db:"key_id"`
	KeyName string `db:"key_name"`
	Address string `db:"address"`
	// LastHour and LastDay count the would-be rejections.
	LastHour int64 `db:"last_hour"`
	LastDay  int64 `db:"last_day"`
}

// Shadow returns, per shadow tier of plan and caller, the would-be
// rejections over the hour and the day before now, most first; at most
// limit rows per tier.
func (q *Reader) Shadow(ctx context.Context, plan string, now time.Time, limit int) ([]ShadowRow, error) {
	const sql = `
SELECT tier, user_id, email, key_id, key_name, address, last_hour, last_day FROM (
  SELECT s.tier, s.user_id, COALESCE(u.email, '') AS email, s.key_id, COALESCE(k.name, '') AS key_name, s.address,
         sum(s.rejections) FILTER (WHERE s.minute >= $3)::bigint AS last_hour,
         sum(s.rejections)::bigint AS last_day,
         row_number() OVER (PARTITION BY s.tier ORDER BY sum(s.rejections) DESC, s.user_id, s.key_id, s.address) AS n
  FROM shadow_minutes s
  LEFT JOIN api_keys k ON k.id = s.key_id
  LEFT JOIN users u ON u.id = s.user_id
  WHERE s.plan = $1 AND s.minute >= $2
  GROUP BY s.tier, s.user_id, u.email, s.key_id, k.name, s.address
) t WHERE n <= $4
ORDER BY tier, last_day DESC, user_id, key_id, address`
	rows, err := q.pool.Query(ctx, sql, plan, now.Add(-24*time.Hour), now.Add(-time.Hour), max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("shadow rejections: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ShadowRow, error) {
		var s ShadowRow
		var hour *int64
		if err := row.Scan(&s.Tier, &s.UserID, &s.Email, &s.KeyID, &s.KeyName, &s.Address, &hour, &s.LastDay); err != nil {
			return s, err
		}
		if hour != nil {
			s.LastHour = *hour
		}
		return s, nil
	})
	if err != nil {
		return nil, fmt.Errorf("shadow rejections: %w", err)
	}
	return out, nil
}
