// Package history keeps the usage history of the protected API: admitted and
// rejected requests per minute for 24 hours and per hour for 90 days, per
// plan, route, key and developer, with anonymous traffic per address block;
// and the would-be rejections of shadow tiers per minute, for a day.
//
// The request path only increments an in-memory tally (Recorder.RecordDecision
// and RecordShadow: one mutex-protected map increment, no allocation for a
// row already in the map). Run adds the tally to Postgres every flush
// interval with an additive upsert, so any number of instances sum exactly,
// and prunes rows past their retention. While Postgres is unreachable the
// tally is kept (up to Options.MaxPending rows; what does not fit is counted
// as dropped) and retried at the next flush; a clean stop flushes once more.
package history

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
)

// Retention of each resolution.
const (
	MinuteRetention = 24 * time.Hour
	HourRetention   = 90 * 24 * time.Hour
)

// Defaults of Options.
const (
	DefaultFlushInterval = 15 * time.Second
	DefaultMaxAddresses  = 1000
	DefaultMaxPending    = 200_000
	pruneEvery           = 10 * time.Minute
)

// Options configure a Recorder; zero fields take the defaults.
type Options struct {
	// FlushInterval is how often the tally is added to Postgres
	// (DefaultFlushInterval).
	FlushInterval time.Duration
	// MaxAddresses bounds the anonymous addresses tallied apart between
	// two flushes (DefaultMaxAddresses); the traffic of further addresses
	// is counted in one row with address "" so a flood from many
	// addresses cannot grow the tally.
	MaxAddresses int
	// MaxPending bounds the usage rows, and apart the shadow rows, kept
	// while Postgres is unreachable (DefaultMaxPending, about 40 MB each);
	// the requests of rows that do not fit are counted in
	// sluice_history_dropped_requests_total.
	MaxPending int
	Logger     *slog.Logger
	// Registerer, when set, receives sluice_history_flushes_total{result},
	// sluice_history_dropped_requests_total and sluice_history_pending_rows.
	Registerer prometheus.Registerer
	// Now is the clock minutes are taken from (time.Now).
	Now func() time.Time
}

// tallyKey is one usage row of the in-memory tally. Its strings are the
// caller's own (the snapshot's plan slug, the mux's route pattern, the
// resolver's subject), so inserting one copies no bytes.
type tallyKey struct {
	minute        int64 // unix minutes
	plan, route   string
	keyID, userID int64
	address       string // an anonymous caller's subject ("ip:..."), else ""
}

type tallyCount struct{ admitted, rejected int64 }

// shadowKey is one would-be rejection row of the tally.
type shadowKey struct {
	minute                   int64
	plan, tier, subject, key string
}

// rowKey is a usage row as stored: the address is a block ("10.1.2.0/24").
type rowKey struct {
	minute        int64
	plan, route   string
	keyID, userID int64
	address       string
}

type shadowRowKey struct {
	minute        int64
	plan, tier    string
	keyID, userID int64
	address       string
}

// tally is what the request path fills between two flushes.
type tally struct {
	usage     map[tallyKey]*tallyCount
	shadow    map[shadowKey]*int64
	addresses int // distinct anonymous addresses in usage
}

func newTally() *tally {
	return &tally{usage: map[tallyKey]*tallyCount{}, shadow: map[shadowKey]*int64{}}
}

func (t *tally) reset() {
	clear(t.usage)
	clear(t.shadow)
	t.addresses = 0
}

// Recorder tallies decisions and shadow rejections and adds them to
// Postgres. It is safe for concurrent use; create it with NewRecorder and
// start it with Run.
type Recorder struct {
	pool *pgxpool.Pool
	opts Options
	log  *slog.Logger
	now  func() time.Time

	mu     sync.Mutex
	active *tally
	spare  *tally
	// lastKey and lastCount are the latest decision's row in active and
	// its count: a busy caller's requests come in runs, and a run costs a
	// comparison per request instead of hashing the row's key into the
	// tally: RecordDecision 479 -> 229 instructions per call (callgrind,
	// BenchmarkMiddlewareRecord/with). Flush forgets them when it swaps
	// active out.
	lastKey   tallyKey
	lastCount *tallyCount

	// flushMu serializes flushes; pending is what earlier flushes failed
	// to write, merged with each new batch.
	flushMu       sync.Mutex
	pending       map[rowKey]tallyCount
	pendingShadow map[shadowRowKey]int64
	lastPrune     time.Time
	// settled tallies the units responses settled (units.go).
	settled settled

	metrics recorderMetrics
}

type recorderMetrics struct {
	flushes *prometheus.CounterVec
	dropped prometheus.Counter
	pending prometheus.Gauge
}

// NewRecorder returns a recorder writing to pool.
func NewRecorder(pool *pgxpool.Pool, opts Options) *Recorder {
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.MaxAddresses <= 0 {
		opts.MaxAddresses = DefaultMaxAddresses
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	r := &Recorder{
		pool: pool, opts: opts, log: opts.Logger, now: opts.Now,
		active: newTally(), spare: newTally(),
		pending: map[rowKey]tallyCount{}, pendingShadow: map[shadowRowKey]int64{},
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.metrics = recorderMetrics{
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_history_flushes_total",
			Help: "Flushes of the usage history tally to Postgres, by result (ok, failed).",
		}, []string{"result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_history_dropped_requests_total",
			Help: "Requests left out of the usage history because Postgres was unreachable for longer than the pending bound holds.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_history_pending_rows",
			Help: "Usage history rows waiting for Postgres after failed flushes.",
		}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(r.metrics.flushes, r.metrics.dropped, r.metrics.pending)
	}
	return r
}

// count returns k's count in t, adding it if new; a new anonymous address
// beyond maxAddresses is counted without its address.
func (t *tally) count(k tallyKey, maxAddresses int) *tallyCount {
	c, ok := t.usage[k]
	if ok {
		return c
	}
	if k.address != "" {
		if t.addresses >= maxAddresses {
			k.address = ""
			if c, ok := t.usage[k]; ok {
				return c
			}
		} else {
			t.addresses++
		}
	}
	c = &tallyCount{}
	t.usage[k] = c
	return c
}

// RecordDecision tallies n decided requests of caller on route (a ServeMux
// pattern, "" for none): admitted when the handler ran, else rejected. It
// implements enforce.DecisionRecorder and never blocks on I/O.
func (r *Recorder) RecordDecision(caller enforce.Caller, route string, n int64, admitted bool) {
	minute := r.now().Unix() / 60
	k := tallyKey{minute: minute, plan: caller.Plan, route: route, keyID: caller.KeyID, userID: caller.UserID}
	if caller.KeyID == 0 && caller.UserID == 0 {
		k.address = caller.Subject
	}
	r.mu.Lock()
	c := r.lastCount
	if c == nil || k != r.lastKey {
		c = r.active.count(k, r.opts.MaxAddresses)
		r.lastKey, r.lastCount = k, c
	}
	if admitted {
		c.admitted += n
	} else {
		c.rejected += n
	}
	r.mu.Unlock()
}

// RecordShadow tallies one request a shadow tier would have rejected. It
// implements enforce.ShadowRecorder and never blocks on I/O.
func (r *Recorder) RecordShadow(s httplimit.ShadowRejection) {
	at := s.At
	if at.IsZero() {
		at = r.now()
	}
	k := shadowKey{minute: at.Unix() / 60, plan: s.Plan, tier: s.Tier, subject: s.Subject, key: s.Key}
	r.mu.Lock()
	t := r.active
	c, ok := t.shadow[k]
	if !ok {
		if strings.HasPrefix(s.Subject, "ip:") && t.addresses >= r.opts.MaxAddresses {
			k.subject = "ip:"
			c, ok = t.shadow[k]
		} else if strings.HasPrefix(s.Subject, "ip:") {
			t.addresses++
		}
		if !ok {
			c = new(int64)
			t.shadow[k] = c
		}
	}
	*c++
	r.mu.Unlock()
}

// Run flushes every FlushInterval until ctx ends, then once more with a
// timeout of its own, so a clean stop loses nothing. Failed flushes are
// logged and retried. It returns nil.
func (r *Recorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := r.Flush(ctx); err != nil {
				r.log.Warn("usage history flush failed; the tally is kept and retried", "err", err)
			}
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := r.Flush(final)
			cancel()
			if err != nil {
				r.log.Warn("final usage history flush failed", "err", err)
			}
			return nil
		}
	}
}

// Flush adds everything tallied so far to Postgres, in one transaction, and
// prunes expired rows every ten minutes. On failure the rows stay pending
// for the next flush.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()

	r.mu.Lock()
	batch := r.active
	r.active, r.spare = r.spare, batch
	r.lastCount = nil
	r.mu.Unlock()
	r.merge(batch)
	batch.reset()

	if len(r.pending) > 0 || len(r.pendingShadow) > 0 {
		if err := r.write(ctx); err != nil {
			r.metrics.flushes.WithLabelValues("failed").Inc()
			r.metrics.pending.Set(float64(len(r.pending) + len(r.pendingShadow)))
			return err
		}
		r.metrics.flushes.WithLabelValues("ok").Inc()
		clear(r.pending)
		clear(r.pendingShadow)
		r.metrics.pending.Set(0)
	}
	if err := r.flushSettled(ctx); err != nil {
		return err
	}
	if now := r.now(); now.Sub(r.lastPrune) >= pruneEvery {
		if err := Prune(ctx, r.pool, now); err != nil {
			return err
		}
		r.lastPrune = now
	}
	return nil
}

// merge adds batch to the pending rows, turning anonymous addresses into
// their blocks, within MaxPending.
func (r *Recorder) merge(batch *tally) {
	var dropped int64
	for k, c := range batch.usage {
		rk := rowKey{minute: k.minute, plan: k.plan, route: k.route, keyID: k.keyID, userID: k.userID, address: Block(k.address)}
		p, ok := r.pending[rk]
		if !ok && len(r.pending) >= r.opts.MaxPending {
			dropped += c.admitted + c.rejected
			continue
		}
		p.admitted += c.admitted
		p.rejected += c.rejected
		r.pending[rk] = p
	}
	for k, c := range batch.shadow {
		rk := shadowRowKey{minute: k.minute, plan: k.plan, tier: k.tier, keyID: idOf(k.key, "key:"), userID: idOf(k.subject, "dev:")}
		if rk.keyID == 0 && rk.userID == 0 {
			rk.address = Block(k.subject)
		}
		p, ok := r.pendingShadow[rk]
		if !ok && len(r.pendingShadow) >= r.opts.MaxPending {
			dropped += *c
			continue
		}
		r.pendingShadow[rk] = p + *c
	}
	if dropped > 0 {
		r.metrics.dropped.Add(float64(dropped))
		r.log.Warn("usage history: pending bound reached while Postgres is unreachable; requests left out", "requests", dropped, "max_pending", r.opts.MaxPending)
	}
}

// idOf parses "<prefix><id>", 0 when s is not of that form.
func idOf(s, prefix string) int64 {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return 0
	}
	return id
}

// Block is the address block an anonymous subject ("ip:<address or
// prefix>") is shown under: an IPv4 address's /24, an IPv6 subject's /48.
// Anything else, including "", is returned as "" (not broken down).
func Block(subject string) string {
	rest, ok := strings.CutPrefix(subject, "ip:")
	if !ok || rest == "" {
		return ""
	}
	var addr netip.Addr
	if p, err := netip.ParsePrefix(rest); err == nil {
		addr = p.Addr()
	} else if a, err := netip.ParseAddr(rest); err == nil {
		addr = a
	} else {
		return ""
	}
	addr = addr.Unmap()
	bits := 24
	if addr.Is6() {
		bits = 48
	}
	p, err := addr.Prefix(bits)
	if err != nil {
		return ""
	}
	return p.String()
}

const upsertMinutes = `
INSERT INTO usage_minutes (minute, plan, route, key_id, user_id, address, admitted, rejected)
SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[])
ON CONFLICT (minute, plan, route, key_id, user_id, address) DO UPDATE
SET admitted = usage_minutes.admitted + EXCLUDED.admitted,
    rejected = usage_minutes.rejected + EXCLUDED.rejected`

const upsertHours = `
INSERT INTO usage_hours (hour, plan, route, key_id, user_id, address, admitted, rejected)
SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[])
ON CONFLICT (hour, plan, route, key_id, user_id, address) DO UPDATE
SET admitted = usage_hours.admitted + EXCLUDED.admitted,
    rejected = usage_hours.rejected + EXCLUDED.rejected`

const upsertShadow = `
INSERT INTO shadow_minutes (minute, plan, tier, key_id, user_id, address, rejections)
SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[])
ON CONFLICT (minute, plan, tier, key_id, user_id, address) DO UPDATE
SET rejections = shadow_minutes.rejections + EXCLUDED.rejections`

// usageColumns are the upsert's arrays, sorted by primary key so that two
// instances flushing the same rows lock them in one order (no deadlock).
type usageColumns struct {
	at                 []time.Time
	plan, route, addr  []string
	keyID, userID      []int64
	admitted, rejected []int64
}

func columns(rows map[rowKey]tallyCount, at func(int64) time.Time) usageColumns {
	keys := make([]rowKey, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sortRowKeys(keys)
	c := usageColumns{}
	for _, k := range keys {
		v := rows[k]
		c.at = append(c.at, at(k.minute))
		c.plan = append(c.plan, k.plan)
		c.route = append(c.route, k.route)
		c.keyID = append(c.keyID, k.keyID)
		c.userID = append(c.userID, k.userID)
		c.addr = append(c.addr, k.address)
		c.admitted = append(c.admitted, v.admitted)
		c.rejected = append(c.rejected, v.rejected)
	}
	return c
}

// write upserts the pending rows: minutes, their hours, shadow minutes.
func (r *Recorder) write(ctx context.Context) error {
	hours := make(map[rowKey]tallyCount, len(r.pending))
	for k, v := range r.pending {
		hk := k
		hk.minute = k.minute / 60 // unix hours
		h := hours[hk]
		h.admitted += v.admitted
		h.rejected += v.rejected
		hours[hk] = h
	}
	mins := columns(r.pending, func(m int64) time.Time { return time.Unix(m*60, 0).UTC() })
	hrs := columns(hours, func(h int64) time.Time { return time.Unix(h*3600, 0).UTC() })

	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("usage history: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if len(mins.at) > 0 {
		if _, err := tx.Exec(ctx, upsertMinutes, mins.at, mins.plan, mins.route, mins.keyID, mins.userID, mins.addr, mins.admitted, mins.rejected); err != nil {
			return fmt.Errorf("usage history: add minutes: %w", err)
		}
		if _, err := tx.Exec(ctx, upsertHours, hrs.at, hrs.plan, hrs.route, hrs.keyID, hrs.userID, hrs.addr, hrs.admitted, hrs.rejected); err != nil {
			return fmt.Errorf("usage history: add hours: %w", err)
		}
	}
	if len(r.pendingShadow) > 0 {
		keys := make([]shadowRowKey, 0, len(r.pendingShadow))
		for k := range r.pendingShadow {
			keys = append(keys, k)
		}
		sortShadowKeys(keys)
		var (
			at                 []time.Time
			plan, tier, addr   []string
			keyID, userID, cnt []int64
		)
		for _, k := range keys {
			at = append(at, time.Unix(k.minute*60, 0).UTC())
			plan, tier, addr = append(plan, k.plan), append(tier, k.tier), append(addr, k.address)
			keyID, userID, cnt = append(keyID, k.keyID), append(userID, k.userID), append(cnt, r.pendingShadow[k])
		}
		if _, err := tx.Exec(ctx, upsertShadow, at, plan, tier, keyID, userID, addr, cnt); err != nil {
			return fmt.Errorf("usage history: add shadow rejections: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("usage history: commit: %w", err)
	}
	return nil
}

const (
	pruneMinutes = `DELETE FROM usage_minutes WHERE minute < $1`
	pruneHours   = `DELETE FROM usage_hours WHERE hour < $1`
	pruneShadow  = `DELETE FROM shadow_minutes WHERE minute < $1`
	pruneUnits   = `DELETE FROM usage_tier_units WHERE hour < $1`
)

// Prune deletes minute rows older than MinuteRetention and hour rows older
// than HourRetention, as of now.
func Prune(ctx context.Context, pool *pgxpool.Pool, now time.Time) error {
	for _, q := range []struct {
		sql    string
		cutoff time.Time
	}{
		{pruneMinutes, now.Add(-MinuteRetention)},
		{pruneHours, now.Add(-HourRetention)},
		{pruneShadow, now.Add(-MinuteRetention)},
		{pruneUnits, now.Add(-HourRetention)},
	} {
		if _, err := pool.Exec(ctx, q.sql, q.cutoff); err != nil {
			return fmt.Errorf("usage history: prune: %w", err)
		}
	}
	return nil
}

func sortRowKeys(keys []rowKey) {
	slices.SortFunc(keys, func(a, b rowKey) int {
		return cmp.Or(cmp.Compare(a.minute, b.minute), strings.Compare(a.plan, b.plan), strings.Compare(a.route, b.route),
			cmp.Compare(a.keyID, b.keyID), cmp.Compare(a.userID, b.userID), strings.Compare(a.address, b.address))
	})
}

func sortShadowKeys(keys []shadowRowKey) {
	slices.SortFunc(keys, func(a, b shadowRowKey) int {
		return cmp.Or(cmp.Compare(a.minute, b.minute), strings.Compare(a.plan, b.plan), strings.Compare(a.tier, b.tier),
			cmp.Compare(a.keyID, b.keyID), cmp.Compare(a.userID, b.userID), strings.Compare(a.address, b.address))
	})
}
