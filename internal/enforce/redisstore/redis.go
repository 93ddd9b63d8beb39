// Package redisstore is the Store shared by many instances through Redis:
// one Lua script call decides every limit of a request atomically (with
// concurrent decisions batched into shared calls), plus the RESP client and
// replies it runs on, usage counting, concurrency slots, charges and quota
// adjustments.
package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storemetrics"
)

// Options configures a Store; the zero value is ready for
// production.
type Options struct {
	// Prefix starts every key (default "sluice:"); tests use a unique one.
	// It may not contain braces: the subject's hash tag must be the key's
	// first.
	Prefix string
	// Timeout bounds one decision, queueing included (default
	// DefaultStoreTimeout); past it the decision fails with
	// ErrStoreUnavailable. Waiting callers check it every Timeout/8, so one
	// gives up between Timeout and 9/8 of it. It also bounds each batch's
	// round trip: on a pipeline worker's own connection (see pipeConn) by
	// its socket deadline, and through go-redis (Cluster and Ring clients,
	// ViaClient) through the context of its commands: give such a client
	// ContextTimeoutEnabled and socket timeouts no shorter, or a busy Redis
	// fails whole batches at the socket's timeout instead.
	Timeout time.Duration
	// Now is for tests only: when set, the script takes its time from Now
	// instead of Redis TIME, so a test controls the clock. Production leaves
	// it nil, and every instance then shares Redis's one clock. The usage
	// bucket is always taken from this clock (default time.Now).
	Now func() time.Time
	// DisableUsage turns off the usage counters read by Usage.
	DisableUsage bool
	// UsageFlush is how often the usage counted in memory is added to Redis
	// (default one second): the most other instances' dashboards lag and a
	// crash loses.
	UsageFlush time.Duration
	// UsageTopSubjects bounds the usage series this store writes per bucket
	// for callers without a Request.Key (anonymous addresses, sign-in
	// throttles): the first that many seen in a bucket, biggest first
	// within a flush, get a series of their own, and the rest are added to
	// one row per route under UsageOthers, so a flood of new callers costs
	// a bounded number of Redis keys (default DefaultUsageTopSubjects).
	// Keyed callers (developers) always get their own series: they are
	// accounts, bounded by sign-up rather than by addresses.
	UsageTopSubjects int
	// UsageClient, when set, is the client the usage series are written
	// and read with, instead of the decisions' client: the portal passes
	// the dashboards' own, so neither the flushes nor the dashboards'
	// reads take the request path's connections.
	UsageClient redis.UniversalClient
	// MaxBatch caps the decisions sent in one batch, one script call on a
	// single Redis (default 128).
	MaxBatch int
	// Pipelines is how many batches may be in flight at once (default 2):
	// a second one sends what arrives during a batch's round trip at once,
	// which cuts the median wait behind a distant Redis by about a quarter
	// (docs/benchmarks.md, "Pipelines").
	Pipelines int
	// QueueSize is how many decisions may wait for a pipeline (default 4096).
	QueueSize int
	// Registerer, when set, receives decision counters, pipeline latency
	// and pipeline size histograms.
	Registerer prometheus.Registerer
	// ViaClient sends the decisions' script calls through the client, so
	// that its hooks (tracing, metrics) see them, instead of over each
	// pipeline worker's connection of its own, which a single Redis client
	// gets unless it authenticates through a credentials provider or has
	// OnConnect or a Limiter (see pipeConn). Everything else always goes
	// through the client.
	ViaClient bool
	// oneRequestPerScript, for tests, sends each request (or coalesced
	// group) in a script call of its own, as the store does for a Redis
	// Cluster or Ring client.
	oneRequestPerScript bool
	// NegativeCacheSize, when positive, remembers up to that many rejected
	// (subject, route) decisions whose rejecting layers are all in
	// ModeReject, and rejects the same request with the same limits locally
	// until the latest RetryAfter has passed, sparing Redis a client that
	// hammers past its limit (rejections answered locally are still counted
	// in usage). The price: a counter reset by hand in Redis is noticed only
	// when the cached rejection runs out. A changed limit is a different
	// request and misses the cache. Off by default here; the portal turns
	// it on (PORTAL_REDIS_NEAR_CACHE, 10,000 entries by default).
	NegativeCacheSize int
}

// Store is the enforce.Store shared by every instance: each decision is made by
// one Lua script (scripts/decide.lua) covering all of the request's limits
// atomically, with time read from Redis. Concurrent decisions are batched: a
// decision that finds a pipeline worker idle is sent at once, and decisions
// arriving meanwhile share the next call of the script, which decides them
// one after the other, each exactly as a call of its own would; identical
// Allow calls of one subject in a batch share one state read and write. So
// Redis runs one command per batch, not one per decision. With a Redis
// Cluster or Ring client, whose keys live on different nodes, each subject's
// requests get a script call of their own, and the calls of a batch share a
// pipeline. On a single Redis each pipeline worker sends its batches over
// a connection of its own, set up from the client's options (see
// pipeConn), and go-redis carries everything else. Usage is tallied in
// memory and written every Options.UsageFlush.
//
// Keys: every limit but the sliding log keeps its state in one record,
// a field of one hash per subject, <prefix>{<subject>}, so a decision reads
// all of them with one HMGET and writes them with one HSET whatever the
// layer count. A limit's record is named by the limit and the figures it
// is of, <name>@<algorithm code>:<window µs>:<limit>:<burst>, its value the
// state as packed doubles, so a limit edited in place finds no record under
// its new name and looks for its former record, whose state the script
// rescales at the next request (see rescale) and replaces; a
// PerKey limit's fields are prefixed with the request's key, <key>|<name>,
// in the same hash; the hash's TTL runs a window past its latest state's
// expiry. The script reads the layout before records (fields <name>,
// <name>:+, <name>:-, <name>:# and e) when a record is missing and replaces
// it, so a deploy loses no count. Redis 7.0 or later is required (the
// script moves TTLs with PEXPIRE GT and NX).
// A sliding log is the hash <prefix>{<subject>}:<field>:log of its requests
// packed 8 bytes each in chunks (see LOG in decide.lua: about 9 bytes of
// Redis per logged request, TestSlidingLogMemory); usage is
// <prefix>{<subject>}:stats:<unix seconds>,
// for at most UsageTopSubjects unkeyed subjects a bucket (the rest are
// added up under UsageOthers).
// One subject's keys share a Redis Cluster slot; every key is written with a
// TTL.
//
// Call Close when done to stop the pipeline workers.
type Store struct {
	client redis.UniversalClient
	// usageClient writes and reads the usage series (Options.UsageClient,
	// else client).
	usageClient redis.UniversalClient
	sha         string
	prefix      string
	timeout     time.Duration
	testNow     func() time.Time
	clock       func() time.Time
	usage       bool
	maxBatch    int
	// onePerScript sends each subject's requests in a script call of their
	// own, for clients whose keys live on several nodes.
	onePerScript bool
	// raw reads the script's replies with parseReply (a single Redis).
	raw bool
	// direct, when set, is the options of the single Redis that each
	// pipeline worker sends its script calls to over a connection of its
	// own (see pipeConn).
	direct   *redis.Options
	metrics  *storemetrics.Metrics
	negative *negativeCache
	// batches numbers the batches sent; a failed batch's number is the
	// cause its calls' errors carry (see batchError).
	batches atomic.Uint64
	// versionChecked is set once checkVersion has passed; refused holds
	// its error when a Redis that was down at start turned out too old,
	// which every decision then fails with (see reload).
	versionChecked atomic.Bool
	refused        atomic.Pointer[error]

	calls      sync.Pool
	argsMu     sync.Mutex                                   // serialises writers of args
	args       atomic.Pointer[map[enforce.Limit]*limitArgs] // copied on write: reads take no lock
	tally      usageTally
	usageFlush time.Duration
	usageTop   int
	// flushMu serialises flushes (the ticker's and Usage's), which share
	// written.
	flushMu sync.Mutex
	// written holds, per bucket, the unkeyed subjects given a series of
	// their own so far; a bucket is dropped once out of retention.
	written map[int64]map[string]struct{}
	queue   chan *redisCall
	// tick is closed and replaced every tickEvery by watch: a caller
	// waiting for a pipeline or a reply wakes on it to compare the time
	// with its deadline, so no decision arms a timer of its own.
	tick      atomic.Pointer[chan struct{}]
	tickEvery time.Duration
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once

	// slots batches the concurrency slots' operations (slots_redis.go).
	slots slotPipe
}

// redisCall is one decision waiting for its pipeline. Calls are pooled:
// done is buffered so the worker's signal never blocks, and a call whose
// caller gave up is left to the garbage collector instead of the pool.
type redisCall struct {
	keys   []string     // the request's keys in the script (see decide.lua)
	mode   string       // "a" (Allow) or "p" (Peek)
	limits []*limitArgs // its limits, sent once per script call
	now    string       // the script's clock argument: "" for Redis TIME
	bucket int64        // the usage bucket of the decision's clock
	done   chan struct{}
	reply  []int64
	err    error
	// next and count coalesce identical Allow calls of one batch (see
	// coalesce): the first call carries count, the others hang off next.
	next  *redisCall
	count int
	// batch is the number of the batch the call was sent in, 0 while it is
	// queued; the caller reads it when its wait times out.
	batch atomic.Uint64
}

func (s *Store) getCall() *redisCall {
	if c, ok := s.calls.Get().(*redisCall); ok {
		return c
	}
	return &redisCall{done: make(chan struct{}, 1)}
}

func (s *Store) putCall(c *redisCall) {
	clear(c.keys)
	clear(c.limits)
	c.keys, c.limits, c.reply, c.err, c.now = c.keys[:0], c.limits[:0], c.reply[:0], nil, ""
	c.next, c.count = nil, 0
	c.batch.Store(0)
	s.calls.Put(c)
}

// New loads the decision script into Redis (SCRIPT LOAD, waiting at
// most one second) and starts the pipeline workers. An unreachable Redis is
// not an error here: the store starts anyway, decisions fail with
// ErrStoreUnavailable until Redis answers, and the script is loaded again on
// the first NOSCRIPT reply, so a portal can start while Redis is down and its
// failure mode governs meanwhile. It fails when Redis answers but rejects the
// script, or when opts.Registerer holds conflicting metrics.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redis store: key prefix %q contains a brace, which would displace the subject's hash tag", opts.Prefix)
	}
	m, err := storemetrics.New(opts.Registerer, "redis")
	if err != nil {
		return nil, err
	}
	sum := sha1.Sum([]byte(decideScript))
	s := &Store{
		client:   client,
		sha:      hex.EncodeToString(sum[:]),
		prefix:   opts.Prefix,
		timeout:  opts.Timeout,
		testNow:  opts.Now,
		clock:    opts.Now,
		usage:    !opts.DisableUsage,
		maxBatch: opts.MaxBatch,
		metrics:  m,
		stop:     make(chan struct{}),
	}
	_, plain := client.(*redis.Client)
	if !plain || opts.oneRequestPerScript {
		s.onePerScript = true
	}
	// A Cluster or Ring client's redirections need go-redis to read the
	// replies itself.
	s.raw = plain
	if plain && !opts.ViaClient {
		s.direct = directOptions(client.(*redis.Client))
	}
	if s.prefix == "" {
		s.prefix = "sluice:"
	}
	s.usageClient = opts.UsageClient
	if s.usageClient == nil {
		s.usageClient = client
	}
	s.usageTop = opts.UsageTopSubjects
	if s.usageTop <= 0 {
		s.usageTop = DefaultUsageTopSubjects
	}
	s.usageFlush = opts.UsageFlush
	if s.usageFlush <= 0 {
		s.usageFlush = time.Second
	}
	if s.timeout <= 0 {
		s.timeout = enforce.DefaultStoreTimeout
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.maxBatch <= 0 {
		s.maxBatch = 128
	}
	if opts.NegativeCacheSize > 0 {
		s.negative = &negativeCache{max: opts.NegativeCacheSize, entries: make(map[negativeKey]negativeEntry)}
	}
	queueSize := opts.QueueSize
	if queueSize <= 0 {
		queueSize = 4096
	}
	s.queue = make(chan *redisCall, queueSize)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.load(ctx); err != nil && !errors.Is(err, enforce.ErrStoreUnavailable) {
		return nil, err
	} else if err == nil {
		if err := s.checkVersion(ctx); err != nil {
			return nil, err
		}
		s.versionChecked.Store(true)
	}
	workers := opts.Pipelines
	if workers <= 0 {
		workers = 2
	}
	s.tickEvery = max(s.timeout/8, 100*time.Microsecond)
	tick := make(chan struct{})
	s.tick.Store(&tick)
	s.wg.Add(workers + 1)
	go s.watch()
	for range workers {
		go s.work()
	}
	if s.usage {
		s.wg.Add(1)
		go s.flushEvery()
	}
	return s, nil
}

// Close stops the pipeline workers and writes the usage counted since the
// last flush (waiting at most a second); decisions still queued fail with
// ErrStoreUnavailable. It does not close the Redis client.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
		if s.usage {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.flushUsage(ctx) // best effort: Redis may be the reason for closing
			cancel()
		}
		for {
			select {
			case c := <-s.queue:
				c.err = errStoreClosed
				c.done <- struct{}{}
			default:
				return
			}
		}
	})
	return nil
}

var errStoreClosed = fmt.Errorf("%w: store closed", enforce.ErrStoreUnavailable)

func (s *Store) load(ctx context.Context) error {
	sha, err := s.client.ScriptLoad(ctx, decideScript).Result()
	if err != nil {
		return fmt.Errorf("load rate-limit script: %w", classify(err))
	}
	if sha != s.sha {
		return fmt.Errorf("load rate-limit script: Redis returned SHA %s, want %s", sha, s.sha)
	}
	return nil
}

// reload loads the script again after a NOSCRIPT (Redis restarted, or was
// down at start) and, the first time Redis answers, checks its version as
// New would have: a Redis found too old is refused for good, every
// decision failing with ErrStoreUnavailable and the reason (the failure mode
// then governs), rather than with the script's error on each call.
func (s *Store) reload(ctx context.Context) error {
	if err := s.load(ctx); err != nil {
		return err
	}
	if s.versionChecked.Load() {
		return nil
	}
	if err := s.checkVersion(ctx); err != nil {
		err = fmt.Errorf("%w: %w", enforce.ErrStoreUnavailable, err)
		s.refused.Store(&err)
		return err
	}
	s.versionChecked.Store(true)
	return nil
}

// checkVersion refuses a Redis older than 7.0, whose PEXPIRE has no GT or NX
// option: decide.lua moves a subject's TTL with them, so on such a Redis
// every decision would fail with a script error rather than a clear one at
// start. It asks PEXPIRE ... GT of a key that does not exist (0 on 7.0,
// nothing written); a Redis down at start is checked once it answers
// (reload).
func (s *Store) checkVersion(ctx context.Context) error {
	err := s.client.Do(ctx, "PEXPIRE", s.prefix+"{version-check}", 1, "GT").Err()
	var rerr redis.Error
	if err != nil && errors.As(err, &rerr) {
		return fmt.Errorf("redis store: Redis 7.0 or later is required (PEXPIRE with GT): %w", err)
	}
	return nil
}

// Timeout is the most one decision waits, queueing included, before it
// fails with ErrStoreUnavailable (Options.Timeout). A failover.Store
// in front of the store relies on it instead of a deadline of its own when
// it is no longer than its own timeout.
func (s *Store) Timeout() time.Duration { return s.timeout }

// ScriptSHA returns the SHA1 of the decision script, for tools such as
// redis-benchmark that call it directly with EVALSHA.
func (s *Store) ScriptSHA() string { return s.sha }

// Allow checks and consumes every limit of req in one script call (see Store).
func (s *Store) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.decide(ctx, req, true, nil)
}

// AllowInto is Allow writing Decision.Layers into layers' backing array when
// it is large enough, so a caller that reuses one slice (the middleware)
// spares an allocation per decision.
func (s *Store) AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error) {
	return s.decide(ctx, req, true, layers)
}

// Peek evaluates req as Allow would, consuming and counting nothing:
// Allowed says whether Allow would admit it now, Remaining and ResetAfter
// describe the current state.
func (s *Store) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	if enforce.HasConcurrency(req.Limits) {
		return s.peekAll(ctx, req) // slots_redis.go
	}
	return s.decide(ctx, req, false, nil)
}

func (s *Store) decide(ctx context.Context, req enforce.Request, consume bool, layers []enforce.LayerResult) (enforce.Decision, error) {
	if err := enforce.ValidateRequest(req); err != nil {
		return enforce.Decision{}, err
	}
	if refused := s.refused.Load(); refused != nil {
		return enforce.Decision{}, *refused
	}
	var negKey negativeKey
	clock := s.clock()
	cached := consume && s.negative != nil
	if cached {
		negKey = negativeKey{req.Subject, req.Key, req.Route}
		if d, ok := s.negative.get(negKey, req.Limits, clock); ok {
			if s.usage {
				s.tally.add(req.Subject, req.Route, enforce.UsageBucketStart(clock.Unix()), false, req.Key != "")
			}
			s.metrics.Count(false)
			return d, nil
		}
	}
	call, err := s.prepare(req, consume, clock)
	if err != nil {
		return enforce.Decision{}, err
	}
	if err := s.do(ctx, call); err != nil {
		return enforce.Decision{}, err
	}
	d, err := decisionOf(call.reply, req, layers)
	if err != nil {
		s.putCall(call)
		return enforce.Decision{}, err
	}
	if consume && s.usage {
		s.tally.add(req.Subject, req.Route, call.bucket, d.Allowed, req.Key != "")
	}
	s.putCall(call)
	if cached && !d.Allowed {
		// Counted from before the request was sent, which is no later than
		// the script's now: the rejection is forgotten no later than the
		// instant an admission becomes possible, whatever the reply's
		// latency or the hosts' clock skew.
		s.negative.put(negKey, req.Limits, d, clock)
	}
	s.metrics.Count(d.Allowed)
	return d, nil
}

// decisionOf reads one request's reply of the decision script ({allowed,
// delay, now, then per limit: allowed, remaining, reset, retry}) into a
// Decision for req, its layers in layers' backing array when it is large
// enough.
func decisionOf(reply []int64, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error) {
	if len(reply) != 3+4*len(req.Limits) {
		return enforce.Decision{}, fmt.Errorf("rate-limit script: reply of %d values for %d limits", len(reply), len(req.Limits))
	}
	if cap(layers) < len(req.Limits) {
		layers = make([]enforce.LayerResult, len(req.Limits))
	}
	d := enforce.Decision{
		Allowed: reply[0] == 1,
		Delay:   enforce.Micros(reply[1]),
		At:      time.UnixMicro(reply[2]),
		Layers:  layers[:len(req.Limits)],
	}
	for i, l := range req.Limits {
		r := reply[3+4*i:]
		d.Layers[i] = enforce.LayerOut{Allowed: r[0] == 1, Remaining: r[1], Reset: r[2], Retry: r[3]}.Result(l)
		if l.Algorithm == enforce.Quota {
			s, e := enforce.PeriodBounds(enforce.PeriodCode(l.Period), reply[2], enforce.AnchorMicros(req.Anchor))
			d.Layers[i].Period = enforce.Micros(e - s)
		}
	}
	return d, nil
}

// negativeCache holds rejections that cannot turn into admissions before
// their RetryAfter (see Options.NegativeCacheSize).
type negativeCache struct {
	mu      sync.Mutex
	max     int
	entries map[negativeKey]negativeEntry
}

// negativeKey names a cached rejection: the three strings as they are,
// which spares the concatenation a string key cost per decision (one
// allocation per request in the portal's allocation profile).
type negativeKey struct{ subject, key, route string }

type negativeEntry struct {
	at, until time.Time
	decision  enforce.Decision
}

func (c *negativeCache) get(key negativeKey, limits []enforce.Limit, now time.Time) (enforce.Decision, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if ok && !now.Before(e.until) {
		delete(c.entries, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok || len(e.decision.Layers) != len(limits) {
		return enforce.Decision{}, false
	}
	for i, l := range limits {
		if e.decision.Layers[i].Limit != l {
			return enforce.Decision{}, false
		}
	}
	elapsed := now.Sub(e.at)
	d := enforce.Decision{Layers: make([]enforce.LayerResult, len(limits))}
	if !e.decision.At.IsZero() {
		d.At = e.decision.At.Add(elapsed)
	}
	for i, l := range e.decision.Layers {
		l.ResetAfter = max(0, l.ResetAfter-elapsed)
		if !l.Allowed {
			l.RetryAfter = max(time.Microsecond, l.RetryAfter-elapsed)
		}
		d.Layers[i] = l
	}
	return d, true
}

// put remembers a rejection when every rejecting layer is in ModeReject;
// queued and degraded requests must reach their handler's own logic.
func (c *negativeCache) put(key negativeKey, limits []enforce.Limit, d enforce.Decision, now time.Time) {
	var wait time.Duration
	for _, l := range d.Layers {
		if l.Allowed {
			continue
		}
		if l.Limit.Mode != enforce.ModeReject && l.Limit.Mode != "" {
			return
		}
		wait = max(wait, l.RetryAfter)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		for k, e := range c.entries {
			if !now.Before(e.until) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.max {
			return // bounded: a full cache of live rejections takes no more
		}
	}
	d.Layers = slices.Clone(d.Layers) // the caller owns the original
	c.entries[key] = negativeEntry{at: now, until: now.Add(wait), decision: d}
}

// prepare builds the request's keys and finds its limits' script arguments
// (see scripts/decide.lua).
func (s *Store) prepare(req enforce.Request, consume bool, clock time.Time) (*redisCall, error) {
	call := s.getCall()
	keys, limits := call.keys, call.limits
	call.mode = "p"
	if consume {
		call.mode = "a"
	}
	if s.testNow != nil {
		call.now = strconv.FormatInt(clock.UnixMicro(), 10)
	}
	call.bucket = enforce.UsageBucketStart(clock.Unix())
	tag := s.prefix + "{" + req.Subject + "}"
	keys = append(keys, tag)
	for i := range req.Limits {
		la, err := s.limitArgs(&req.Limits[i])
		if err != nil {
			s.putCall(call)
			return nil, err
		}
		if req.Limits[i].PerKey && req.Key != "" {
			la = la.scoped(req.Key)
		}
		if la.kind == enforce.KindQuota && !req.Anchor.IsZero() {
			la = la.anchored(req.Anchor.UnixMicro())
		}
		if la.kind == enforce.KindSlidingLog {
			keys = append(keys, tag+":"+la.field+":log")
		}
		limits = append(limits, la)
	}
	call.keys, call.limits = keys, limits
	return call, nil
}

// limitArgs is one limit's script arguments, built once per distinct limit:
// its field name and boxed figures would otherwise cost five allocations per
// layer per decision.
type limitArgs struct {
	kind  enforce.AlgKind
	field string
	// args are the script's eight arguments of the limit: field, code,
	// limit, window, burst, cost, figures, shadow (1 or 0).
	args [8]any
}

// scoped returns la for the state of one key inside the subject: the same
// figures under the field <key>|<field>, beside the subject's shared
// fields in the same hash, so one script call still decides both.
func (la *limitArgs) scoped(key string) *limitArgs {
	field := key + "|" + la.field
	out := &limitArgs{kind: la.kind, field: field, args: la.args}
	out.args[0] = field
	return out
}

// anchored returns la for a subject anchored at anchor (µs): a quota's
// burst argument carries the anchor, so one script call decides subjects of
// different anchors, and identical requests of one subject still coalesce.
func (la *limitArgs) anchored(anchor int64) *limitArgs {
	out := *la
	out.args[4] = anchor
	return &out
}

// maxCachedLimits bounds the store's cache of limitArgs; past it (a plan
// edited that many times without a restart) a limit's arguments are built
// per decision, as before the cache.
const maxCachedLimits = 4096

// limitArgs returns l's script arguments from the cache, building and
// caching them on a miss.
func (s *Store) limitArgs(l *enforce.Limit) (*limitArgs, error) {
	var cached map[enforce.Limit]*limitArgs
	if m := s.args.Load(); m != nil {
		cached = *m
	}
	if la := cached[*l]; la != nil {
		return la, nil
	}
	p, err := enforce.ParamsOf(l)
	if err != nil {
		return nil, err
	}
	// The state is named by the limit, and the figures that give it its
	// meaning are stored beside it, so an edit rescales it (see rescale).
	field := l.Name
	var buf [80]byte
	b := append(buf[:0], p.Code()...)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.Window, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.Limit, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.Burst, 10)
	la := &limitArgs{kind: p.Kind, field: field, args: [8]any{field, codeArg(&p), p.Limit, p.Window, p.Burst, p.Cost, string(b), shadowArg(p.Shadow)}}
	// A miss copies the map: limits change with plans, rarely, while every
	// decision reads them.
	s.argsMu.Lock()
	var old map[enforce.Limit]*limitArgs
	if m := s.args.Load(); m != nil {
		old = *m
	}
	if _, ok := old[*l]; !ok && len(old) < maxCachedLimits {
		next := make(map[enforce.Limit]*limitArgs, len(old)+1)
		maps.Copy(next, old)
		next[*l] = la
		s.args.Store(&next)
	}
	s.argsMu.Unlock()
	return la, nil
}

// shadowArg is the script's shadow flag.
func shadowArg(shadow bool) int64 {
	if shadow {
		return 1
	}
	return 0
}

// codeArg is kind's script code as an argument, boxed without allocating;
// a leaky bucket in queue mode is "lq", so the script knows to report its
// wait as the request's delay.
func codeArg(p *enforce.Params) any {
	switch p.Kind {
	case enforce.KindQuota:
		return p.Period
	case enforce.KindFixedWindow:
		return enforce.CodeFixedWindow
	case enforce.KindSlidingLog:
		return enforce.CodeSlidingLog
	case enforce.KindSlidingCounter:
		return enforce.CodeSlidingCount
	case enforce.KindTokenBucket:
		return enforce.CodeTokenBucket
	}
	if p.Queue {
		return "lq"
	}
	return enforce.CodeLeakyBucket
}

func (s *Store) usageKey(subject string, bucket int64) string {
	var digits [20]byte
	return s.prefix + "{" + subject + "}:stats:" + string(strconv.AppendInt(digits[:0], bucket, 10))
}

// StampsDecisions is true: every decision carries Redis's TIME.
func (s *Store) StampsDecisions() bool { return true }
