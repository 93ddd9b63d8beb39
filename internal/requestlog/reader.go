package requestlog

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Filter selects log rows; fields that are set must all match. From and To
// bound the time ([From, To)) and are required.
type Filter struct {
	From, To time.Time
	// UserID selects one developer's rows; the developer portal always
	// sets it to the signed-in developer.
	UserID int64
	KeyID  int64
	// Anonymous selects callers without a key; Address one address block
	// ("192.0.2.0/24") of them.
	Anonymous bool
	Address   string
	Plan      string
	Route     string
	// Status selects one HTTP status the client got; StatusClass a class
	// of them (4 for 4xx).
	Status      int
	StatusClass int
	// Layer selects the rows where this policy name fired ("pro-search").
	Layer   string
	Outcome Outcome
	WayIn   string
}

// where is f as SQL conditions on l, with their arguments from $1.
func (f Filter) where() (string, []any) {
	var sb strings.Builder
	args := []any{f.From, f.To}
	sb.WriteString("l.at >= $1 AND l.at < $2")
	add := func(cond string, v any) {
		args = append(args, v)
		sb.WriteString(" AND ")
		sb.WriteString(strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if f.UserID != 0 {
		add("l.user_id = ?", f.UserID)
	}
	if f.KeyID != 0 {
		add("l.key_id = ?", f.KeyID)
	}
	if f.Anonymous {
		sb.WriteString(" AND l.key_id = 0 AND l.user_id = 0")
	}
	if f.Address != "" {
		add("l.address = ?", f.Address)
	}
	if f.Plan != "" {
		add("l.plan = ?", f.Plan)
	}
	if f.Route != "" {
		add("l.route = ?", f.Route)
	}
	if f.Status != 0 {
		add("l.status = ?", int16(f.Status))
	}
	if f.StatusClass != 0 {
		add("l.status / 100 = ?", int16(f.StatusClass))
	}
	if f.Layer != "" {
		add("l.layer = ?", f.Layer)
	}
	if f.Outcome != 0 {
		add("l.outcome = ?", f.Outcome.String())
	}
	if f.WayIn != "" {
		add("l.way_in = ?", f.WayIn)
	}
	return sb.String(), args
}

// Row is one stored entry with the names a person reads.
type Row struct {
	ID      int64
	At      time.Time
	WayIn   string
	Outcome string
	Plan    string
	Route   string
	KeyID   int64
	// KeyName and KeyPrefix name the key ("" when it is gone or the row is
	// anonymous); the prefix is the key's current secret's visible start.
	KeyName   string
	KeyPrefix string
	UserID    int64
	Email     string
	// Address is an anonymous caller's block, else "".
	Address string
	Layer   string
	// RetryAfter is in whole seconds, 0 for none.
	RetryAfter     int64
	StoreDegraded  string
	Status         int
	UpstreamStatus int
	Latency        time.Duration
	// Weight is how many decisions the row stands for (1 in Weight
	// admissions was stored).
	Weight int
}

// Cursor is where a page of List ended: the next page starts below it.
// Its zero value starts at the newest row.
type Cursor struct {
	At time.Time
	ID int64
}

// String is the cursor as a URL parameter ("" for the zero cursor).
func (c Cursor) String() string {
	if c.ID == 0 {
		return ""
	}
	return strconv.FormatInt(c.At.UnixMicro(), 10) + "." + strconv.FormatInt(c.ID, 10)
}

// ErrCursor is returned by ParseCursor for text String did not write.
var ErrCursor = fmt.Errorf("cursor must be what the page's Older link carries")

// ParseCursor reads what String wrote ("" is the zero cursor).
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	at, id, ok := strings.Cut(s, ".")
	us, err1 := strconv.ParseInt(at, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if !ok || err1 != nil || err2 != nil || n <= 0 {
		return Cursor{}, ErrCursor
	}
	return Cursor{At: time.UnixMicro(us).UTC(), ID: n}, nil
}

// Reader reads the log.
type Reader struct{ pool *pgxpool.Pool }

// NewReader returns a reader over pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

// MaxExport bounds one Each (a CSV download).
const MaxExport = 1_000_000

const selectRows = `
SELECT l.id, l.at, l.way_in, l.outcome, l.plan, l.route, l.key_id, COALESCE(k.name, ''),
       COALESCE((SELECT s.prefix FROM api_key_secrets s WHERE s.key_id = l.key_id ORDER BY s.id DESC LIMIT 1), ''),
       l.user_id, COALESCE(u.email, ''), l.address, l.layer, l.retry_after, l.degraded,
       l.status, l.upstream_status, l.latency_us, l.weight
FROM request_log l
LEFT JOIN api_keys k ON k.id = l.key_id AND l.key_id <> 0
LEFT JOIN users u ON u.id = l.user_id AND l.user_id <> 0
WHERE %s
ORDER BY l.at DESC, l.id DESC
LIMIT %d`

// List returns up to limit of f's rows after the cursor, newest first, and
// the cursor of the page after (zero when this page is the last).
func (q *Reader) List(ctx context.Context, f Filter, after Cursor, limit int) ([]Row, Cursor, error) {
	limit = max(min(limit, 500), 1)
	cond, args := f.where()
	if after.ID != 0 {
		args = append(args, after.At, after.ID)
		cond += fmt.Sprintf(" AND (l.at, l.id) < ($%d, $%d)", len(args)-1, len(args))
	}
	var out []Row
	err := q.each(ctx, fmt.Sprintf(selectRows, cond, limit+1), args, func(r Row) error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, Cursor{}, err
	}
	var next Cursor
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = Cursor{At: last.At, ID: last.ID}
	}
	return out, next, nil
}

// Each calls fn with each of f's rows, newest first, at most MaxExport, as
// they are read (an export is never held in memory whole). An error from
// fn stops the reading and is returned.
func (q *Reader) Each(ctx context.Context, f Filter, fn func(Row) error) error {
	cond, args := f.where()
	return q.each(ctx, fmt.Sprintf(selectRows, cond, MaxExport), args, fn)
}

func (q *Reader) each(ctx context.Context, sql string, args []any, fn func(Row) error) error {
	rows, err := q.pool.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("request log: %w", err)
	}
	var (
		r                Row
		retry            int32
		status, upstream int16
		latency          int64
		weight           int32
	)
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.At, &r.WayIn, &r.Outcome, &r.Plan, &r.Route, &r.KeyID, &r.KeyName,
		&r.KeyPrefix, &r.UserID, &r.Email, &r.Address, &r.Layer, &retry, &r.StoreDegraded,
		&status, &upstream, &latency, &weight}, func() error {
		r.RetryAfter, r.Status, r.UpstreamStatus = int64(retry), int(status), int(upstream)
		r.Latency, r.Weight = time.Duration(latency)*time.Microsecond, int(weight)
		return fn(r)
	})
	if err != nil {
		return fmt.Errorf("request log: %w", err)
	}
	return nil
}
