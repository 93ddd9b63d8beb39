package metering

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Record is one usage record as read.
type Record struct {
	ID             string    `json:"id"`
	DeveloperID    int64     `json:"developer_id"`
	DeveloperEmail string    `json:"developer_email"`
	Plan           string    `json:"plan"`
	Tier           string    `json:"tier"`
	PeriodStart    time.Time `json:"period_start"`
	PeriodEnd      time.Time `json:"period_end"`
	Revision       int       `json:"revision"`
	Requests       int64     `json:"requests"`
	Rejected       int64     `json:"rejected"`
	// Units is the cost units the admitted requests spent on the tier, as
	// settled after their responses (one a request for tier "").
	Units       int64      `json:"units"`
	CreatedAt   time.Time  `json:"created_at"`
	DeliveredAt *time.Time `json:"delivered_at"`
	Attempts    int        `json:"delivery_attempts"`
	LastError   string     `json:"last_delivery_error"`
}

// Filter selects records whose period starts in [From, To); fields that
// are set must match. Tier selects one tier's records; AllTiersOnly the
// records of every request (tier "").
type Filter struct {
	From, To     time.Time
	DeveloperID  int64
	Plan         string
	Tier         string
	AllTiersOnly bool
}

// Cursor is where a page of List ended ("" starts at the oldest).
type Cursor string

// ErrCursor is returned for a cursor List did not hand out.
var ErrCursor = errors.New("cursor must be the next_cursor of a previous page")

func (c Cursor) parse() (time.Time, string, error) {
	if c == "" {
		return time.Time{}, "", nil
	}
	us, id, ok := strings.Cut(string(c), ".")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(id, "sluice_") {
		return time.Time{}, "", ErrCursor
	}
	return time.UnixMicro(n).UTC(), id, nil
}

// Reader reads usage records.
type Reader struct{ pool *pgxpool.Pool }

// NewReader returns a reader over pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

// MaxExport bounds one Each (a CSV download).
const MaxExport = 1_000_000

const selectRecords = `
SELECT r.id, r.user_id, COALESCE(u.email, ''), r.plan, r.tier, r.period_start, r.period_end, r.revision,
       r.requests, r.rejected, r.units, r.created_at, r.delivered_at, r.attempts, r.last_error
FROM meter_records r LEFT JOIN users u ON u.id = r.user_id
WHERE r.period_start >= $1 AND r.period_start < $2 AND ($3 = 0 OR r.user_id = $3) AND ($4 = '' OR r.plan = $4)
  AND ($5 = '' OR r.tier = $5) AND (NOT $6 OR r.tier = '') AND (r.period_start, r.id) > ($7, $8)
ORDER BY r.period_start, r.id
LIMIT $9`

// List returns up to limit of f's records after the cursor, oldest period
// first, and the cursor of the next page ("" on the last).
func (q *Reader) List(ctx context.Context, f Filter, after Cursor, limit int) ([]Record, Cursor, error) {
	limit = max(min(limit, 1000), 1)
	var out []Record
	if err := q.each(ctx, f, after, limit+1, func(r Record) error { out = append(out, r); return nil }); err != nil {
		return nil, "", err
	}
	var next Cursor
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = Cursor(strconv.FormatInt(last.PeriodStart.UnixMicro(), 10) + "." + last.ID)
	}
	return out, next, nil
}

// Each calls fn with each of f's records, oldest period first, at most
// MaxExport, as they are read.
func (q *Reader) Each(ctx context.Context, f Filter, fn func(Record) error) error {
	return q.each(ctx, f, "", MaxExport, fn)
}

func (q *Reader) each(ctx context.Context, f Filter, after Cursor, limit int, fn func(Record) error) error {
	at, id, err := after.parse()
	if err != nil {
		return err
	}
	rows, err := q.pool.Query(ctx, selectRecords, f.From, f.To, f.DeveloperID, f.Plan, f.Tier, f.AllTiersOnly, at, id, limit)
	if err != nil {
		return fmt.Errorf("metering: records: %w", err)
	}
	var r Record
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.DeveloperID, &r.DeveloperEmail, &r.Plan, &r.Tier, &r.PeriodStart, &r.PeriodEnd,
		&r.Revision, &r.Requests, &r.Rejected, &r.Units, &r.CreatedAt, &r.DeliveredAt, &r.Attempts, &r.LastError}, func() error {
		r.PeriodStart, r.PeriodEnd, r.CreatedAt = r.PeriodStart.UTC(), r.PeriodEnd.UTC(), r.CreatedAt.UTC()
		return fn(r)
	})
	if err != nil {
		return fmt.Errorf("metering: records: %w", err)
	}
	return nil
}

// CSVHeader is the first line of a records download; CSVRow is a record's
// line under it.
var CSVHeader = []string{"id", "developer_id", "developer_email", "plan", "tier", "period_start", "period_end",
	"revision", "requests", "rejected", "units", "created_at", "delivered_at"}

// CSVRow is r as a line of CSVHeader's columns.
func CSVRow(r Record) []string {
	delivered := ""
	if r.DeliveredAt != nil {
		delivered = r.DeliveredAt.UTC().Format(time.RFC3339)
	}
	email := r.DeveloperEmail
	if email != "" && strings.ContainsRune("=+-@\t\r", rune(email[0])) {
		email = "'" + email // a spreadsheet would run it as a formula
	}
	return []string{r.ID, strconv.FormatInt(r.DeveloperID, 10), email, r.Plan, r.Tier,
		r.PeriodStart.Format(time.RFC3339), r.PeriodEnd.Format(time.RFC3339), strconv.Itoa(r.Revision),
		strconv.FormatInt(r.Requests, 10), strconv.FormatInt(r.Rejected, 10), strconv.FormatInt(r.Units, 10),
		r.CreatedAt.Format(time.RFC3339), delivered}
}
