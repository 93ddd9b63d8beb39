package analytics

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Consumer is one caller's traffic over a range on one plan: a key, or an
// anonymous address block.
type Consumer struct {
	KeyID, UserID int64
	Address       string
	Plan          string
	// Label is the key's name and its developer's email, or the block.
	Label              string
	Requests, Rejected int64
}

// ConsumerOrder is what TopConsumers ranks by.
type ConsumerOrder string

// The orders of TopConsumers.
const (
	ByRequests ConsumerOrder = "requests"
	ByRejected ConsumerOrder = "rejected"
)

// consumerKey is a consumer_days row's consumer.
type consumerKey struct {
	plan          string
	keyID, userID int64
	address       string
}

// TopConsumers ranks the consumers of the UTC days [from, to) of plan ("" for
// every plan) and of developer userID (0 for every one), busiest or most
// rejected first, at most limit; a key on two plans is two consumers.
//
// Ranking every consumer over a month is a scan of up to a row per key and
// day (3,000,000 rows for 100,000 keys), seconds of work, so for every
// developer together the ranking is found from each day's own top m
// (Fagin's threshold algorithm): the consumers seen there get their exact
// totals, and one never seen has at most the sum over the days of each
// day's m-th value. When the limit-th exact total reaches that bound the
// ranking is exact; else m grows, and past a bound the days are scanned.
// A developer's own ranking is their few rows, read at once.
func (q *Reader) TopConsumers(ctx context.Context, from, to time.Time, plan string, userID int64, order ConsumerOrder, limit int) ([]Consumer, error) {
	if order != ByRejected {
		order = ByRequests
	}
	limit = max(limit, 1)
	var top []Consumer
	var err error
	if userID == 0 {
		for m := max(4*limit, 50); m <= 5000 && top == nil && err == nil; m *= 4 {
			top, err = q.topThreshold(ctx, from, to, plan, order, limit, m)
		}
	}
	if top == nil && err == nil {
		top, err = q.topScan(ctx, from, to, plan, userID, order, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("analytics: top consumers: %w", err)
	}
	return top, q.label(ctx, top)
}

// topThreshold is TopConsumers from each day's top m; nil when that does
// not prove the ranking.
func (q *Reader) topThreshold(ctx context.Context, from, to time.Time, plan string, order ConsumerOrder, limit, m int) ([]Consumer, error) {
	rejected := ""
	if order == ByRejected {
		rejected = " AND rejected > 0"
	}
	rows, err := q.pool.Query(ctx, fmt.Sprintf(`
SELECT d::date, c.plan, c.key_id, c.user_id, c.address, c.n
FROM generate_series($1::date, $2::date - 1, interval '1 day') AS d
CROSS JOIN LATERAL (
    SELECT plan, key_id, user_id, address, %[1]s AS n FROM consumer_days
    WHERE day = d::date AND ($3 = '' OR plan = $3)%[2]s
    ORDER BY %[1]s DESC LIMIT $4
) c`, order, rejected), from, to, plan, m)
	if err != nil {
		return nil, err
	}
	var (
		day    time.Time
		k      consumerKey
		n      int64
		seen   = map[consumerKey]bool{}
		perDay = map[time.Time]int{}
		lastOf = map[time.Time]int64{}
	)
	_, err = pgx.ForEachRow(rows, []any{&day, &k.plan, &k.keyID, &k.userID, &k.address, &n}, func() error {
		seen[k] = true
		perDay[day]++
		lastOf[day] = n // rows of a day come busiest first
		return nil
	})
	if err != nil {
		return nil, err
	}
	// An unseen consumer has at most a day's m-th value on each day whose
	// top m was full, and nothing on the others.
	var bound int64
	for d, c := range perDay {
		if c == m {
			bound += lastOf[d]
		}
	}
	exact, err := q.totals(ctx, from, to, seen)
	if err != nil {
		return nil, err
	}
	sortConsumers(exact, order)
	if len(exact) > limit {
		exact = exact[:limit]
	}
	switch {
	case len(exact) == limit && value(exact[limit-1], order) >= bound:
		return exact, nil
	case len(exact) < limit && bound == 0:
		return exact, nil // every consumer of the range was seen
	}
	return nil, nil
}

func value(c Consumer, order ConsumerOrder) int64 {
	if order == ByRejected {
		return c.Rejected
	}
	return c.Requests
}

func sortConsumers(cs []Consumer, order ConsumerOrder) {
	slices.SortFunc(cs, func(a, b Consumer) int {
		return cmp.Or(cmp.Compare(value(b, order), value(a, order)), cmp.Compare(a.KeyID, b.KeyID),
			strings.Compare(a.Address, b.Address), strings.Compare(a.Plan, b.Plan))
	})
}

// totals are the exact totals over [from, to) of the consumers in keys,
// each read through the (key_id, address, day) index.
func (q *Reader) totals(ctx context.Context, from, to time.Time, keys map[consumerKey]bool) ([]Consumer, error) {
	var (
		plans, addrs []string
		ids, users   []int64
	)
	for k := range keys {
		plans, addrs = append(plans, k.plan), append(addrs, k.address)
		ids, users = append(ids, k.keyID), append(users, k.userID)
	}
	rows, err := q.pool.Query(ctx, `
SELECT k.plan, k.key_id, k.user_id, k.address, s.requests, s.rejected
FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::text[]) AS k(plan, key_id, user_id, address)
CROSS JOIN LATERAL (
    SELECT COALESCE(sum(c.requests), 0)::bigint AS requests, COALESCE(sum(c.rejected), 0)::bigint AS rejected FROM consumer_days c
    WHERE c.key_id = k.key_id AND c.address = k.address AND c.day >= $1 AND c.day < $2 AND c.plan = k.plan AND c.user_id = k.user_id
) s`, from, to, plans, ids, users, addrs)
	if err != nil {
		return nil, err
	}
	return scanConsumers(rows)
}

// topScan ranks by summing every row of the range.
func (q *Reader) topScan(ctx context.Context, from, to time.Time, plan string, userID int64, order ConsumerOrder, limit int) ([]Consumer, error) {
	rejected := ""
	if order == ByRejected {
		rejected = " AND rejected > 0"
	}
	rows, err := q.pool.Query(ctx, fmt.Sprintf(`
SELECT plan, key_id, user_id, address, sum(requests)::bigint, sum(rejected)::bigint FROM consumer_days
WHERE day >= $1 AND day < $2 AND ($3 = '' OR plan = $3) AND ($4 = 0 OR user_id = $4)%[2]s
GROUP BY plan, key_id, user_id, address
ORDER BY sum(%[1]s) DESC, key_id, address, plan
LIMIT $5`, order, rejected), from, to, plan, userID, limit)
	if err != nil {
		return nil, err
	}
	return scanConsumers(rows)
}

// label names each consumer: a key by its name and developer's email, an
// address block as itself.
func (q *Reader) label(ctx context.Context, cs []Consumer) error {
	var ids []int64
	for i := range cs {
		c := &cs[i]
		switch {
		case c.KeyID != 0:
			ids = append(ids, c.KeyID)
		case c.Address == "":
			c.Label = "anonymous, other blocks"
		default:
			c.Label = "anonymous, " + c.Address
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := q.pool.Query(ctx, `
SELECT k.id, k.name || ' (' || COALESCE(u.email, 'developer ' || k.user_id) || ')'
FROM api_keys k LEFT JOIN users u ON u.id = k.user_id WHERE k.id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("analytics: name consumers: %w", err)
	}
	names := map[int64]string{}
	var (
		id   int64
		name string
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &name}, func() error { names[id] = name; return nil }); err != nil {
		return fmt.Errorf("analytics: name consumers: %w", err)
	}
	for i := range cs {
		if c := &cs[i]; c.KeyID != 0 {
			c.Label = cmp.Or(names[c.KeyID], fmt.Sprintf("key %d (developer %d)", c.KeyID, c.UserID))
		}
	}
	return nil
}

// scanConsumers reads rows of plan, key_id, user_id, address, requests and
// rejected.
func scanConsumers(rows pgx.Rows) ([]Consumer, error) {
	var out []Consumer
	var c Consumer
	_, err := pgx.ForEachRow(rows, []any{&c.Plan, &c.KeyID, &c.UserID, &c.Address, &c.Requests, &c.Rejected},
		func() error { out = append(out, c); return nil })
	return out, err
}
