package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Charger adds consumption admitted elsewhere to a store's state, past the
// limit if need be; redisstore.Store is one.
type Charger interface {
	Charge(ctx context.Context, req enforce.Request) error
}

// PeerStore is another region's store as sync publishes to it.
type PeerStore struct {
	Name    string
	Charger Charger
	// Ping reports whether the peer answers; sync asks it of a peer it
	// found unreachable before sending it anything again.
	Ping func(ctx context.Context) error
}

// shareSuffix names a limit's share beside the limit itself in a sync
// region that lost a peer: the two states differ (and so do their names,
// which one request requires).
const shareSuffix = "~share"

// publishWorkers is how many charges to one peer are in flight at once:
// the peer's redisstore.Store batches concurrent calls into one script call, so
// a round costs a few round trips, not one per subject.
const publishWorkers = 128

// Store is the engine's Store seen from one region (see the package doc).
// Call Run in sync mode to publish.
type Store struct {
	next     enforce.Store
	cfg      Config
	num, den int64
	logger   *slog.Logger
	peers    []*peer

	mu sync.Mutex
	// pending is this region's consumption admitted since the last round,
	// by subject, waiting to be published to every peer.
	pending map[string]*pending
	// degraded is true while a peer is unreachable: decisions then hold to
	// this region's share as well.
	degraded atomic.Bool
	// lastAt is the latest decision's store clock (µs): a fixed window's
	// consumption is published only while its window runs by that clock.
	lastAt   atomic.Int64
	admitted atomic.Int64
	rounds   atomic.Int64
	overflow atomic.Int64
}

type peer struct {
	PeerStore
	// backlog holds what could not be published to this peer; only the
	// sync round touches it, Status reads its size.
	backlog   map[string]*pending
	backlogN  atomic.Int64
	reachable atomic.Bool
	since     atomic.Int64 // unix µs of the last change of reachable
	published atomic.Int64
	dropped   atomic.Int64
}

// pending is one subject's consumption waiting to be published.
type pending struct {
	subject string
	limits  []pendingLimit
}

type pendingLimit struct {
	limit enforce.Limit // Cost holds the units consumed
	// window is a fixed window's index, -1 for the other algorithms.
	window int64
}

// New wraps next (the local region's store) for cfg, which Validate must
// have accepted. peers are the other regions' stores (sync only).
func New(next enforce.Store, cfg Config, peers []PeerStore, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = p.Name
	}
	if err := cfg.Validate(names); err != nil {
		return nil, err
	}
	s := &Store{next: next, cfg: cfg, num: cfg.weight(cfg.Region), den: cfg.totalWeight(), logger: logger, pending: map[string]*pending{}}
	if cfg.Mode == Shared {
		s.num, s.den = 1, 1
	}
	now := time.Now().UnixMicro()
	for _, p := range peers {
		if p.Ping == nil || cfg.Mode == Sync && p.Charger == nil {
			return nil, fmt.Errorf("peer %q: no store", p.Name)
		}
		if cfg.Mode == Shared {
			return nil, fmt.Errorf("peer %q: shared mode has no peers", p.Name)
		}
		pr := &peer{PeerStore: p, backlog: map[string]*pending{}}
		pr.reachable.Store(true)
		pr.since.Store(now)
		s.peers = append(s.peers, pr)
	}
	return s, nil
}

// Mode is the mode the store runs.
func (s *Store) Mode() Mode { return s.cfg.Mode }

// ShareOf is this region's share of a figure: floor(n × weight / total), at
// least 1 (n itself in shared mode).
func (s *Store) ShareOf(n int64) int64 {
	v := n * s.num / s.den
	if v < 1 {
		return 1
	}
	return v
}

// ShareLimit is l as this region enforces it in share mode: its limit and
// (when set) its burst scaled by ShareOf. The docs and headers of a region
// in share mode show these figures.
func (s *Store) ShareLimit(l enforce.Limit) enforce.Limit {
	if l.Limit < 1 {
		return l // invalid: the store refuses it as it is
	}
	l.Limit = s.ShareOf(l.Limit)
	if l.Burst > 0 {
		l.Burst = s.ShareOf(l.Burst)
	}
	return l
}

// Allow decides req in this region (see enforce.Store).
func (s *Store) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.decide(ctx, req, true, s.next.Allow)
}

// layersAllower is the engine stores' Allow that writes the layers into
// the caller's slice (redisstore.Store, failover.Store, memstore.Store).
type layersAllower interface {
	AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error)
}

// AllowInto is Allow writing Decision.Layers into layers' backing array
// when the wrapped store can and the limits are the request's own (sync
// while every peer answers), so the middleware keeps its allocation-free
// path.
func (s *Store) AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error) {
	into, ok := s.next.(layersAllower)
	if !ok {
		return s.Allow(ctx, req)
	}
	return s.decide(ctx, req, true, func(ctx context.Context, r enforce.Request) (enforce.Decision, error) {
		return into.AllowInto(ctx, r, layers)
	})
}

// Peek evaluates req as Allow would, consuming nothing.
func (s *Store) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.decide(ctx, req, false, s.next.Peek)
}

func (s *Store) decide(ctx context.Context, req enforce.Request, consume bool, call func(context.Context, enforce.Request) (enforce.Decision, error)) (enforce.Decision, error) {
	switch s.cfg.Mode {
	case Shared:
		return call(ctx, req)
	case Share:
		scaled := req
		scaled.Limits = make([]enforce.Limit, len(req.Limits))
		for i, l := range req.Limits {
			scaled.Limits[i] = s.ShareLimit(l)
		}
		return call(ctx, scaled)
	}
	publish := true
	if consume && !s.room(req.Subject) {
		// Nothing more can wait for publication: this subject holds to
		// its share here, so what the peers do not see of it stays
		// within that share.
		publish = false
		s.overflow.Add(1)
	}
	var (
		d   enforce.Decision
		err error
	)
	if !publish || s.degraded.Load() {
		d, err = s.fallback(ctx, req, call)
		d.RegionShare = err == nil
	} else {
		d, err = call(ctx, req)
	}
	if err != nil {
		return d, err
	}
	if !d.At.IsZero() {
		s.lastAt.Store(d.At.UnixMicro())
	}
	if consume && d.Allowed {
		s.admitted.Add(1)
		if publish {
			s.record(req, d.At)
		}
	}
	return d, nil
}

// fallback decides req on the full limits (local plus published
// consumption) and this region's share of them (local consumption since
// the fallback began) in one call, all or nothing, and answers with the
// share's figures: the region's own limit while it cannot tell its peers
// what it spends.
func (s *Store) fallback(ctx context.Context, req enforce.Request, call func(context.Context, enforce.Request) (enforce.Decision, error)) (enforce.Decision, error) {
	n := len(req.Limits)
	both := req
	both.Limits = make([]enforce.Limit, 2*n)
	copy(both.Limits, req.Limits)
	for i, l := range req.Limits {
		sl := s.ShareLimit(l)
		sl.Name += shareSuffix
		both.Limits[n+i] = sl
	}
	d, err := call(ctx, both)
	if err != nil {
		return d, err
	}
	if len(d.Layers) != 2*n {
		return enforce.Decision{}, fmt.Errorf("region: %d layers for %d limits", len(d.Layers), 2*n)
	}
	out := d
	out.Layers = make([]enforce.LayerResult, n)
	for i := range n {
		full, share := d.Layers[i], d.Layers[n+i]
		share.Limit.Name = req.Limits[i].Name
		share.Remaining = min(share.Remaining, full.Remaining)
		share.ResetAfter = max(share.ResetAfter, full.ResetAfter)
		if !full.Allowed {
			share.Allowed = false
			share.RetryAfter = max(share.RetryAfter, full.RetryAfter)
		}
		out.Layers[i] = share
	}
	return out, nil
}

// room reports whether subject's consumption can wait for publication.
func (s *Store) room(subject string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pending[subject]
	return ok || len(s.pending) < s.cfg.MaxPending
}

// record adds an admitted request's consumption to what waits for
// publication.
func (s *Store) record(req enforce.Request, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	us := at.UnixMicro()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[req.Subject]
	if p == nil {
		p = &pending{subject: req.Subject}
		s.pending[req.Subject] = p
	}
	for _, l := range req.Limits {
		p.add(l, windowOf(l, us), cost(l))
	}
}

func (p *pending) add(l enforce.Limit, window, units int64) {
	l.Cost = 0
	for i := range p.limits {
		pl := &p.limits[i]
		if pl.window == window && sameState(pl.limit, l) {
			pl.limit.Cost += units
			return
		}
	}
	l.Cost = units
	p.limits = append(p.limits, pendingLimit{limit: l, window: window})
}

// sameState reports whether a and b name the same state (costs aside).
func sameState(a, b enforce.Limit) bool {
	a.Cost, b.Cost = 0, 0
	return a == b
}

func windowOf(l enforce.Limit, us int64) int64 {
	if l.Algorithm != enforce.FixedWindow {
		return -1
	}
	w := l.Window.Microseconds()
	if w < 1 {
		return -1
	}
	return us / w
}

func cost(l enforce.Limit) int64 {
	if l.Cost <= 0 {
		return 1
	}
	return l.Cost
}

// Run publishes every interval until ctx ends (sync mode), or asks each
// peer whether it answers (share mode, for the dashboard and /readyz); it
// returns at once without peers.
func (s *Store) Run(ctx context.Context) error {
	if len(s.peers) == 0 {
		return nil
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Sync(ctx)
		}
	}
}

// Sync runs one publication round: up to MaxSubjectsPerSync subjects'
// consumption since the last round, and each peer's backlog, are charged
// to every peer that answers. A peer that fails is marked unreachable (the
// region falls back to its share) and keeps what it missed in its backlog
// until it answers again. Run calls it every interval; tests call it
// directly.
func (s *Store) Sync(ctx context.Context) {
	if s.cfg.Mode == Share {
		for _, p := range s.peers {
			s.setReachable(p, p.Ping(ctx) == nil)
		}
		return
	}
	if s.cfg.Mode != Sync {
		return
	}
	s.rounds.Add(1)
	batch := s.take()
	now := s.lastAt.Load()
	var wg sync.WaitGroup
	for _, p := range s.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.publish(ctx, p, batch, now)
		}()
	}
	wg.Wait()
	down := false
	for _, p := range s.peers {
		if !p.reachable.Load() {
			down = true
		}
	}
	if s.degraded.Swap(down) != down {
		if down {
			s.logger.Warn("region: a peer is unreachable; enforcing this region's share", "region", s.cfg.Region)
		} else {
			s.logger.Info("region: every peer answers again; counting published consumption", "region", s.cfg.Region)
		}
	}
}

// take removes up to MaxSubjectsPerSync subjects from pending.
func (s *Store) take() []*pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pending, 0, min(len(s.pending), s.cfg.MaxSubjectsPerSync))
	for k, p := range s.pending {
		if len(out) == s.cfg.MaxSubjectsPerSync {
			break
		}
		out = append(out, p)
		delete(s.pending, k)
	}
	return out
}

// publish charges batch, after p's backlog, to p.
func (s *Store) publish(ctx context.Context, p *peer, batch []*pending, now int64) {
	if !p.reachable.Load() {
		if err := p.Ping(ctx); err != nil {
			s.keep(p, batch)
			return
		}
	}
	work := batch
	if len(p.backlog) > 0 {
		work = make([]*pending, 0, len(batch)+min(len(p.backlog), s.cfg.MaxSubjectsPerSync))
		for k, b := range p.backlog {
			if len(work) == s.cfg.MaxSubjectsPerSync {
				break
			}
			work = append(work, b)
			delete(p.backlog, k)
		}
		work = append(work, batch...)
	}
	jobs := make(chan *pending)
	var (
		mu     sync.Mutex
		failed []*pending
		wg     sync.WaitGroup
		sent   atomic.Int64
	)
	for range min(publishWorkers, len(work)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range jobs {
				req, units := chargeOf(job, now)
				if req.Subject == "" {
					continue
				}
				if err := p.Charger.Charge(ctx, req); err != nil {
					if !errors.Is(err, enforce.ErrStoreUnavailable) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
						// Not the peer's absence: a refused request
						// would fail again, so it is dropped.
						s.logger.Error("region: a peer refused a charge", "peer", p.Name, "err", err)
						p.dropped.Add(1)
						continue
					}
					mu.Lock()
					failed = append(failed, job)
					mu.Unlock()
					continue
				}
				sent.Add(units)
			}
		}()
	}
	for _, job := range work {
		jobs <- job
	}
	close(jobs)
	wg.Wait()
	p.published.Add(sent.Load())
	if len(failed) > 0 {
		s.keep(p, failed)
		return
	}
	if len(work) == 0 && p.reachable.Load() {
		// Nothing to send: make sure the peer is there all the same, or
		// a cut link would go unnoticed until the next request.
		if err := p.Ping(ctx); err != nil {
			s.setReachable(p, false)
			return
		}
	}
	s.setReachable(p, true)
	p.backlogN.Store(int64(len(p.backlog)))
}

// keep puts what p missed in its backlog, merged by subject, and marks p
// unreachable.
func (s *Store) keep(p *peer, missed []*pending) {
	s.setReachable(p, false)
	for _, m := range missed {
		b := p.backlog[m.subject]
		if b == nil {
			if len(p.backlog) >= s.cfg.MaxPending {
				p.dropped.Add(1)
				continue
			}
			b = &pending{subject: m.subject}
			p.backlog[m.subject] = b
		}
		for _, l := range m.limits {
			b.add(l.limit, l.window, l.limit.Cost)
		}
	}
	p.backlogN.Store(int64(len(p.backlog)))
}

func (s *Store) setReachable(p *peer, ok bool) {
	if p.reachable.Swap(ok) != ok {
		p.since.Store(time.Now().UnixMicro())
		if ok {
			s.logger.Info("region: peer answers again", "region", s.cfg.Region, "peer", p.Name)
		} else {
			s.logger.Warn("region: peer unreachable", "region", s.cfg.Region, "peer", p.Name)
		}
	}
}

// chargeOf is the request that charges job to a peer, leaving out the
// fixed windows that have ended by now (µs, the store's clock): charged
// later they would count in a window they were not spent in. It returns a
// zero Request when nothing is left.
func chargeOf(job *pending, now int64) (enforce.Request, int64) {
	req := enforce.Request{Subject: job.subject, Limits: make([]enforce.Limit, 0, len(job.limits))}
	var units int64
	for _, pl := range job.limits {
		if pl.window >= 0 && now > 0 && windowOf(pl.limit, now) > pl.window {
			continue
		}
		if hasName(req.Limits, pl.limit.Name) {
			// One request names a limit once: the same limit's
			// other, ended, window (or its figures before an edit) is
			// left out.
			continue
		}
		req.Limits = append(req.Limits, pl.limit)
		units += pl.limit.Cost
	}
	if len(req.Limits) == 0 {
		return enforce.Request{}, 0
	}
	return req, units
}

func hasName(ls []enforce.Limit, name string) bool {
	for _, l := range ls {
		if l.Name == name {
			return true
		}
	}
	return false
}

// Status is what the dashboard and /readyz show of the regions.
type Status struct {
	Region string
	Mode   Mode
	// Weight and TotalWeight give this region's share of each limit.
	Weight, TotalWeight int64
	// Degraded is true while sync holds to the share for want of a peer.
	Degraded bool
	// Admitted is the requests this instance admitted since it started.
	Admitted int64
	// Overflow counts decisions made on the share because the table of
	// consumption awaiting publication was full.
	Overflow int64
	Peers    []PeerStatus
}

// PeerStatus is one peer as this region sees it.
type PeerStatus struct {
	Name      string
	Reachable bool
	// Since is when Reachable last changed (or the store started).
	Since time.Time
	// Published is the cost units this instance published to the peer,
	// summed over limits.
	Published int64
	// Backlog is the subjects waiting for the peer to answer; Dropped the
	// charges lost to a full backlog or refused by the peer.
	Backlog int64
	Dropped int64
}

// Status reports the mode, this region's share and each peer's state.
func (s *Store) Status() Status {
	st := Status{
		Region: s.cfg.Region, Mode: s.cfg.Mode, Weight: s.num, TotalWeight: s.den,
		Degraded: s.degraded.Load(), Admitted: s.admitted.Load(), Overflow: s.overflow.Load(),
	}
	for _, p := range s.peers {
		st.Peers = append(st.Peers, PeerStatus{
			Name: p.Name, Reachable: p.reachable.Load(), Since: time.UnixMicro(p.since.Load()),
			Published: p.published.Load(), Backlog: p.backlogN.Load(), Dropped: p.dropped.Load(),
		})
	}
	return st
}
