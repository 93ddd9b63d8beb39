package snapshot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
)

// rebuildTimeout bounds one snapshot rebuild.
const rebuildTimeout = 10 * time.Second

// Channel is the Postgres NOTIFY channel the schema's triggers announce
// changes on.
const Channel = "sluice_changes"

// Options tunes a Holder. Zero values take the defaults.
type Options struct {
	// Resync rebuilds the snapshot this often even without a notification,
	// in case one was missed (default 30 s).
	Resync time.Duration
	// Coalesce is how long to wait for more notifications after the first
	// before rebuilding, so a burst of writes costs one rebuild (default
	// 20 ms).
	Coalesce time.Duration
	// LastUsed, if set, is touched for every resolved key.
	LastUsed *apikeys.LastUsed
	// Now is the clock used to judge key and secret expiry (default
	// time.Now); tests inject their own.
	Now func() time.Time
	// AnonPrefixes are the address blocks anonymous callers are limited by
	// (the zero value: each IPv4 address, each IPv6 /64).
	AnonPrefixes enforce.AddressPrefixes
}

// Holder keeps the current Snapshot and rebuilds it when Postgres announces a
// change. It implements enforce.Resolver. Its methods are safe for
// concurrent use.
type Holder struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	opts   Options

	current atomic.Pointer[Snapshot]
	version atomic.Uint64
	// subjects remembers the subjects of recent anonymous addresses.
	subjects subjectCache

	loadMu    sync.Mutex
	mu        sync.Mutex
	readyOnce sync.Once
	ready     chan struct{}
	changed   chan struct{}
}

var _ enforce.Resolver = (*Holder)(nil)

// NewHolder returns a Holder over pool. Call Load (or Run, which loads
// first) before resolving keys.
func NewHolder(pool *pgxpool.Pool, logger *slog.Logger, opts Options) *Holder {
	if opts.Resync <= 0 {
		opts.Resync = 30 * time.Second
	}
	if opts.Coalesce <= 0 {
		opts.Coalesce = 20 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Holder{pool: pool, logger: logger, opts: opts,
		ready: make(chan struct{}), changed: make(chan struct{})}
}

// Load reads a snapshot and installs it. On error the previous snapshot
// stays in place. Loads are serialised so that a slow, older read never
// replaces a newer one.
func (h *Holder) Load(ctx context.Context) error {
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	snap, err := Load(ctx, h.pool)
	if err != nil {
		return err
	}
	h.install(snap)
	return nil
}

func (h *Holder) install(snap *Snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.current.Store(snap)
	h.version.Add(1)
	close(h.changed)
	h.changed = make(chan struct{})
	h.readyOnce.Do(func() { close(h.ready) })
}

// rebuild loads and installs a snapshot, logging a failure: the previous
// snapshot keeps serving, and the next notification or resync tries again.
func (h *Holder) rebuild(ctx context.Context, why string) {
	start := time.Now()
	// Bounded, so an unreachable Postgres cannot stall the listener.
	lctx, cancel := context.WithTimeout(ctx, rebuildTimeout)
	defer cancel()
	if err := h.Load(lctx); err != nil {
		if ctx.Err() == nil {
			h.logger.Warn("snapshot rebuild failed; keeping the previous one", "reason", why, "err", err)
		}
		return
	}
	s := h.Current()
	h.logger.Debug("snapshot rebuilt", "reason", why, "plans", len(s.plans), "secrets", len(s.keys),
		"took", time.Since(start))
}

// Run listens for change notifications on a dedicated connection and rebuilds
// the snapshot on each burst of them and on the resync timer, reconnecting
// with backoff when the connection drops. A failed rebuild keeps the previous
// snapshot. It returns nil when ctx ends.
func (h *Holder) Run(ctx context.Context) error {
	const minBackoff, maxBackoff = 100 * time.Millisecond, 10 * time.Second
	backoff := minBackoff
	for {
		listening, err := h.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if listening {
			backoff = minBackoff
		}
		h.logger.Warn("snapshot listener lost; serving the last snapshot", "err", err, "retry_in", backoff)
		// Without notifications, rebuilding on each retry keeps the view
		// fresh if only the listening connection is broken.
		h.rebuild(ctx, "listener down")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// listen runs one LISTEN session. It reports whether it got as far as
// listening, and why it ended.
func (h *Holder) listen(ctx context.Context) (bool, error) {
	conn, err := pgx.ConnectConfig(ctx, h.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(closeCtx) //nolint:errcheck // the session is over either way
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	// Changes made while no one listened are caught up now.
	h.rebuild(ctx, "listening")
	resync := time.Now().Add(h.opts.Resync)
	for {
		err := h.wait(ctx, conn, resync)
		switch {
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, errQuiet):
			h.rebuild(ctx, "resync")
			resync = time.Now().Add(h.opts.Resync)
			continue
		case err != nil:
			return true, err
		}
		// Coalesce a burst: keep reading until Coalesce passes without a
		// notification, but never longer than 5×Coalesce in all.
		limit := time.Now().Add(5 * h.opts.Coalesce)
		for {
			next := time.Now().Add(h.opts.Coalesce)
			if next.After(limit) {
				next = limit
			}
			err := h.wait(ctx, conn, next)
			if errors.Is(err, errQuiet) {
				break
			}
			if err != nil {
				return true, err
			}
			if !time.Now().Before(limit) {
				break
			}
		}
		h.rebuild(ctx, "notified")
		resync = time.Now().Add(h.opts.Resync)
	}
}

// errQuiet means no notification arrived before the deadline.
var errQuiet = errors.New("no notification")

// wait blocks until a notification arrives (nil), the deadline passes
// (errQuiet) or the connection fails.
func (h *Holder) wait(ctx context.Context, conn *pgx.Conn, deadline time.Time) error {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	_, err := conn.WaitForNotification(wctx)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		// The deadline expired: pgx leaves the connection usable after a
		// read timeout.
		return errQuiet
	}
	return err
}

// Current returns the installed snapshot, or nil before the first load.
func (h *Holder) Current() *Snapshot { return h.current.Load() }

// Ready is closed once the first snapshot is installed.
func (h *Holder) Ready() <-chan struct{} { return h.ready }

// Version counts installed snapshots, starting at 1 for the first.
func (h *Holder) Version() uint64 { return h.version.Load() }

// Changed returns a channel closed when the next snapshot is installed; take
// it before making a change, then wait on it.
func (h *Holder) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// ErrNotLoaded is returned by ResolveKey before the first snapshot is
// installed. It does not wrap enforce.ErrInvalidKey: the key may be fine, so
// the middleware answers 503 (retry shortly) rather than 401.
var ErrNotLoaded = errors.New("control-plane snapshot not loaded yet")

// Errors ResolveKey returns for a bad key; each wraps enforce.ErrInvalidKey,
// so the middleware answers 401 and never falls back to the anonymous plan.
// They are made once because ResolveKey runs on every request.
var (
	errMalformed = fmt.Errorf("%w: %w", enforce.ErrInvalidKey, apikeys.ErrMalformed)
	errUnknown   = fmt.Errorf("%w: unknown or revoked API key", enforce.ErrInvalidKey)
	errExpired   = fmt.Errorf("%w: %w", enforce.ErrInvalidKey, apikeys.ErrExpired)
)

// ResolveKey resolves a presented secret against the current snapshot
// without I/O: checksum, hash, map lookup, expiry. Malformed, unknown,
// revoked and expired keys (and a retired secret past its grace period)
// return an error wrapping enforce.ErrInvalidKey; before the first load a
// well-formed key gets ErrNotLoaded. The returned Caller's
// Limits are shared: do not modify them.
func (h *Holder) ResolveKey(secret string) (enforce.Caller, error) {
	if apikeys.Check(secret) != nil {
		return enforce.Caller{}, errMalformed
	}
	snap := h.current.Load()
	if snap == nil {
		return enforce.Caller{}, ErrNotLoaded
	}
	e, ok := snap.keys[apikeys.Hash(secret)]
	if !ok {
		return enforce.Caller{}, errUnknown
	}
	now := h.opts.Now()
	if !e.secretExpires.IsZero() && !now.Before(e.secretExpires) {
		return enforce.Caller{}, errExpired
	}
	if !e.keyExpires.IsZero() && !now.Before(e.keyExpires) {
		return enforce.Caller{}, errExpired
	}
	if h.opts.LastUsed != nil {
		h.opts.LastUsed.Touch(e.caller.KeyID, now)
	}
	return e.caller, nil
}

// AnonPrefixes is the address blocks anonymous callers are limited by
// (Options.AnonPrefixes), for programs that must name them alike.
func (h *Holder) AnonPrefixes() enforce.AddressPrefixes { return h.opts.AnonPrefixes }

// Anonymous returns the caller for a request without a key: subject
// "ip:<addr>" or "ip:<block>" (Options.AnonPrefixes) under the anonymous plan's limits (none if no plan is marked
// anonymous, or before the first load).
func (h *Holder) Anonymous(ip netip.Addr) enforce.Caller {
	c := enforce.Caller{Subject: h.subjects.subject(ip, h.opts.AnonPrefixes)}
	if snap := h.current.Load(); snap != nil && snap.anonymous != nil {
		c.Plan = snap.anonymous.Slug
		c.Limits = snap.anonymousLimits
	}
	return c
}

// subjectSlots is the size of the table of anonymous subjects: far more
// addresses than a portal usually sees at once calling again and again.
const subjectSlots = 1024

// subjectCache maps client addresses to their anonymous subjects in a
// direct-mapped table. Formatting a subject ("ip:" and the address or its
// block) costs two allocations per anonymous request, about a tenth of a
// microsecond with the garbage they make; a hit costs a hash and one
// comparison. A miss (a new address, or a flood of them, each of which
// takes over its slot) costs one small allocation more than no cache.
type subjectCache struct {
	slots [subjectSlots]atomic.Pointer[subjectEntry]
}

type subjectEntry struct {
	ip      netip.Addr
	subject string
}

// subject returns p.Subject(ip), from the table when ip was seen last in
// its slot.
func (c *subjectCache) subject(ip netip.Addr, p enforce.AddressPrefixes) string {
	b := ip.As16()
	h := (binary.LittleEndian.Uint64(b[:8])*31 ^ binary.LittleEndian.Uint64(b[8:])) * 0x9E3779B97F4A7C15
	slot := &c.slots[h>>(64-10)] // 10 = log2(subjectSlots)
	if e := slot.Load(); e != nil && e.ip == ip {
		return e.subject
	}
	subject := p.Subject(ip)
	slot.Store(&subjectEntry{ip: ip, subject: subject})
	return subject
}
