// Package ledger makes quotas durable: Postgres is the ledger of quota
// consumption, the counting store (Redis) a fast copy of it.
//
// A Ledger wraps the store the requests are decided with. Every admitted
// request's quota consumption is tallied in memory and added to the
// quota_ledger table every FlushInterval (additive upserts, so instances sum
// exactly). A quota counter the store has lost (Redis restarted empty or
// flushed, a portal restarted on the memory store) shows in the decision
// itself: the period's first admission, remaining = limit - cost. On that
// decision the Ledger reads the subject's consumption from the ledger (its
// rows plus this instance's tally not yet written) and adds it to the
// counter before the decision is answered; when the rebuilt count leaves no
// room for the request, the decision is turned into a rejection and the
// request's cost taken back off the counter. So a lost counter is rebuilt
// before it is used again; what can be missing is what other instances
// admitted in their last flush interval, not yet in Postgres.
//
// While the shared store is down and a failover.Store decides locally, the
// local counters are set from the ledger too (each instance its share of
// what is left of the quota), the local admissions are tallied into the
// ledger like any other, and once the shared store answers again they are
// written back to its counters.
package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/enforce"
)

// DefaultFlushInterval is how often the tally is added to Postgres: the
// most consumption a lost counter can miss is what the other instances
// admitted in their last interval (and in a flush that was failing while
// Postgres was down).
const DefaultFlushInterval = 5 * time.Second

// pruneAfter is how long a row outlives its period.
const pruneAfter = 24 * time.Hour

// Adjuster is what a counting store offers for quotas outside decisions
// (both enforce stores implement it).
type Adjuster interface {
	Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error)
	AddQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error)
	GrantQuota(ctx context.Context, req enforce.Request, units int64) (enforce.LayerResult, error)
	ResetQuota(ctx context.Context, req enforce.Request) (enforce.LayerResult, error)
}

// Options configure New.
type Options struct {
	// Shared is the counting store behind the decisions (the redisstore.Store,
	// or the memstore.Store of a single instance).
	Shared Adjuster
	// Local is a failover.Store's local store, nil without one.
	Local Adjuster
	// FlushInterval is how often the tally is written (DefaultFlushInterval).
	FlushInterval time.Duration
	Logger        *slog.Logger
}

// key is one ledger row.
type key struct {
	subject, quota, scope string
	start                 int64 // the period's start, unix µs
}

// entry is what a key carries besides its units: what writing it back or
// rebuilding it needs.
type entry struct {
	units int64
	end   int64 // the period's end, unix µs
	req   enforce.Request
}

// Ledger is an enforce.Store recording quota consumption in Postgres and
// rebuilding lost quota counters from it. Create it with New, start it
// with Run.
type Ledger struct {
	inner  enforce.Store
	into   layersAllower // inner, when it can
	pool   *pgxpool.Pool
	shared Adjuster
	local  Adjuster
	every  time.Duration
	log    *slog.Logger

	mu sync.Mutex
	// tally is consumption not yet written; flushing is the batch being
	// written (still this instance's own until committed).
	tally, flushing map[key]*entry
	// debt is local admissions not yet added to the shared counters.
	debt map[key]*entry
	// synced says which run of local decisions (outage) a key's local
	// counter was set from the ledger in.
	synced map[key]uint64

	// outage numbers the runs of local decisions; inOutage is whether the
	// latest decision was local. Read on every decision without the lock.
	outage   atomic.Uint64
	inOutage atomic.Bool
}

// New wraps inner, recording into pool.
func New(inner enforce.Store, pool *pgxpool.Pool, opts Options) *Ledger {
	l := &Ledger{
		inner: inner, pool: pool, shared: opts.Shared, local: opts.Local,
		every: cmp.Or(opts.FlushInterval, DefaultFlushInterval),
		log:   opts.Logger,
		tally: map[key]*entry{}, flushing: map[key]*entry{},
		debt: map[key]*entry{}, synced: map[key]uint64{},
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.into, _ = inner.(layersAllower)
	return l
}

// layersAllower is the stores' Allow into the caller's layers.
type layersAllower interface {
	AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error)
}

// Unwrap returns the wrapped store.
func (l *Ledger) Unwrap() enforce.Store { return l.inner }

// Allow decides with the wrapped store and settles the decision's quotas
// with the ledger.
func (l *Ledger) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	d, err := l.inner.Allow(ctx, req)
	if err != nil {
		return d, err
	}
	return l.settle(ctx, req, d), nil
}

// AllowInto is Allow into layers, when the wrapped store can.
func (l *Ledger) AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error) {
	if l.into == nil {
		return l.Allow(ctx, req)
	}
	d, err := l.into.AllowInto(ctx, req, layers)
	if err != nil {
		return d, err
	}
	return l.settle(ctx, req, d), nil
}

// Peek evaluates with the wrapped store; it records nothing.
func (l *Ledger) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return l.inner.Peek(ctx, req)
}

// settle tallies d's quota consumption and rebuilds the counters d found
// lost.
func (l *Ledger) settle(ctx context.Context, req enforce.Request, d enforce.Decision) enforce.Decision {
	if !hasQuota(req) {
		l.observe(d.Local)
		return d
	}
	outage := l.observe(d.Local)
	for i := range d.Layers {
		lr := &d.Layers[i]
		if lr.Limit.Algorithm != enforce.Quota || i >= len(req.Limits) {
			continue
		}
		k, e := keyOf(req, i, lr, d.At)
		cost := max(lr.Limit.Cost, 1)
		consumed := d.Allowed && lr.Allowed
		if d.Local {
			consumed = l.syncLocal(ctx, req, i, k, e, lr, cost, consumed, outage)
		} else if consumed && lr.Remaining == lr.Limit.Limit-cost {
			consumed = l.rebuild(ctx, req, i, k, e, lr, cost)
		}
		if !consumed && d.Allowed && lr.Limit.Mode != enforce.ModeShadow && lr.Allowed {
			// rebuilt without room: the request is rejected after all
			lr.Allowed = false
		}
		if !lr.Allowed && lr.Limit.Mode != enforce.ModeShadow {
			d.Allowed = false
			d.Delay = 0
		}
		if consumed {
			l.add(k, e, cost, d.Local)
		}
	}
	return d
}

// observe notes whether the latest decision was local, and returns the
// number of the current run of local decisions.
func (l *Ledger) observe(local bool) uint64 {
	if l.inOutage.Load() != local {
		l.mu.Lock()
		if local && !l.inOutage.Load() {
			l.outage.Add(1)
		}
		l.inOutage.Store(local)
		l.mu.Unlock()
	}
	return l.outage.Load()
}

func hasQuota(req enforce.Request) bool {
	for i := range req.Limits {
		if req.Limits[i].Algorithm == enforce.Quota {
			return true
		}
	}
	return false
}

// keyOf is layer i's ledger row and a one-limit request naming its quota
// (as the caller asked for it, not as a local store divided it).
func keyOf(req enforce.Request, i int, lr *enforce.LayerResult, at time.Time) (key, entry) {
	if at.IsZero() {
		at = time.Now()
	}
	l := req.Limits[i]
	start, end := enforce.QuotaPeriod(l, req.Anchor, at)
	k := key{subject: req.Subject, quota: l.Name, start: start.UnixMicro()}
	// The caller's own limit, not a copy: add copies it into an entry it
	// keeps, so a decision allocates nothing here.
	one := enforce.Request{Subject: req.Subject, Route: req.Route, Limits: req.Limits[i : i+1 : i+1], Anchor: req.Anchor}
	if l.PerKey {
		k.scope = req.Key
		one.Key = req.Key
	}
	return k, entry{end: end.UnixMicro(), req: one}
}

// used is key's consumption as the ledger knows it: its row plus this
// instance's tally not yet committed.
func (l *Ledger) used(ctx context.Context, k key) (int64, error) {
	var n int64
	err := l.pool.QueryRow(ctx, selectUsed, k.subject, k.quota, k.scope, time.UnixMicro(k.start).UTC()).Scan(&n)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("quota ledger: read %s %s: %w", k.subject, k.quota, err)
	}
	l.mu.Lock()
	if e := l.tally[k]; e != nil {
		n += e.units
	}
	if e := l.flushing[k]; e != nil {
		n += e.units
	}
	l.mu.Unlock()
	return n, nil
}

const selectUsed = `SELECT used FROM quota_ledger WHERE subject = $1 AND quota = $2 AND scope = $3 AND period_start = $4`

// rebuild puts the ledger's count of k back into the shared counter, which
// the decision found empty and charged cost to, and reports whether the
// request still fits the quota (else its cost is taken back off).
func (l *Ledger) rebuild(ctx context.Context, req enforce.Request, i int, k key, e entry, lr *enforce.LayerResult, cost int64) bool {
	u, err := l.used(ctx, k)
	if err != nil {
		l.log.Warn("quota counter found empty, and the ledger is unreadable; decided on the counter as it is", "subject", k.subject, "quota", k.quota, "err", err)
		return true
	}
	l.mu.Lock()
	delete(l.debt, k) // the ledger's figure holds them
	l.mu.Unlock()
	if u == 0 {
		return true
	}
	fits := u+cost <= lr.Limit.Limit
	add := u
	if !fits {
		add = u - cost // the request is not admitted: its cost goes
	}
	got, err := adjust(ctx, l.shared, e.req, add)
	if err != nil {
		l.log.Warn("quota counter found empty; rebuilding it from the ledger failed", "subject", k.subject, "quota", k.quota, "err", err)
		return true
	}
	l.log.Info("quota counter rebuilt from the ledger", "subject", k.subject, "quota", k.quota, "used", u)
	lr.Remaining = got.Remaining
	if !fits {
		lr.Remaining = 0
		lr.RetryAfter = lr.ResetAfter
	}
	return fits
}

// syncLocal sets k's local counter, once per run of local decisions, to
// this instance's share of what the ledger leaves of the quota, and
// reports whether the request fits it.
func (l *Ledger) syncLocal(ctx context.Context, req enforce.Request, i int, k key, e entry, lr *enforce.LayerResult, cost int64, consumed bool, outage uint64) bool {
	if l.local == nil {
		return consumed
	}
	l.mu.Lock()
	done := l.synced[k] == outage
	l.mu.Unlock()
	if done {
		return consumed
	}
	u, err := l.used(ctx, k)
	if err != nil {
		l.log.Warn("local quota counter not set from the ledger", "subject", k.subject, "quota", k.quota, "err", err)
		return consumed
	}
	// The local store decided on its share of the limit (divided by the
	// instances, and by a sync region's weight); it gets that share of
	// what is left.
	share, full := lr.Limit.Limit, max(req.Limits[i].Limit, 1)
	left := max(full-u, 0)
	base := max(share-(left*share+full-1)/full, 0)
	want := base
	fits := true
	if consumed {
		if base+cost <= share {
			want += cost
		} else {
			fits = false
		}
	}
	local := e.req
	local.Limits = []enforce.Limit{lr.Limit}
	if _, err := l.local.ResetQuota(ctx, local); err != nil {
		l.log.Warn("local quota counter not set from the ledger", "subject", k.subject, "quota", k.quota, "err", err)
		return consumed
	}
	got, err := adjust(ctx, l.local, local, want)
	if err != nil {
		l.log.Warn("local quota counter not set from the ledger", "subject", k.subject, "quota", k.quota, "err", err)
		return consumed
	}
	l.mu.Lock()
	l.synced[k] = outage
	l.mu.Unlock()
	lr.Remaining = got.Remaining
	if !fits {
		lr.Remaining = 0
		lr.RetryAfter = lr.ResetAfter
	}
	return consumed && fits
}

// adjust adds n units to req's quota counter (takes them off for n < 0).
func adjust(ctx context.Context, a Adjuster, req enforce.Request, n int64) (enforce.LayerResult, error) {
	switch {
	case n > 0:
		return a.AddQuota(ctx, req, n)
	case n < 0:
		return a.GrantQuota(ctx, req, -n)
	}
	// Nothing to change: read the layer as it stands.
	d, err := a.Peek(ctx, req)
	if err != nil {
		return enforce.LayerResult{}, err
	}
	return d.Layers[0], nil
}

// add tallies cost units of k; a local admission is also owed to the
// shared counter.
func (l *Ledger) add(k key, e entry, cost int64, local bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	inc := func(m map[key]*entry) {
		t := m[k]
		if t == nil {
			t = &entry{end: e.end, req: e.req}
			t.req.Limits = []enforce.Limit{e.req.Limits[0]}
			m[k] = t
		}
		t.units += cost
	}
	inc(l.tally)
	if local {
		inc(l.debt)
	}
}
