package enforce

import (
	"bytes"
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

//go:embed scripts/decide.lua
var decideScript string

// RedisOptions configures a RedisStore; the zero value is ready for
// production.
type RedisOptions struct {
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
	// Pipelines is how many batches may be in flight at once (default 2).
	// A second pipeline sends what arrives while a batch is in flight at
	// once instead of after its round trip: through a proxy delaying each
	// way (250 us asked, its sleeps ran late: round trips of a millisecond
	// or more), requests arriving at random at 2,000 and 10,000 a second
	// waited 27 % less at the median than with one (2.8 against 3.9 ms, 3.2
	// against 4.5; medians of three runs). What it costs is script calls:
	// in the portal on one local Redis (scripts/bench.sh) one pipeline
	// decided 22 requests per call against 12 - 13 with two, and Redis
	// spent about 6 us of CPU per request against 7 - 10, yet the portal's
	// req/s did not move (0.96x anonymous, 1.04x with a key, medians of 5
	// interleaved rounds) nor its own CPU per request. 64 callers over
	// 1,000 subjects ran at the same rate either way within the noise
	// (BenchmarkRedisStore; one pipeline used to leave Redis idle while the
	// client read each reply, 20 % fewer decisions/s, before the pipeline
	// read its replies itself), and 4 or 8 cut the batches smaller for no
	// gain. 2026-12-03, 2-core AMD EPYC VM, load average 2 - 5.
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

// RedisStore is the Store shared by every instance: each decision is made by
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
// memory and written every RedisOptions.UsageFlush.
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
type RedisStore struct {
	client redis.UniversalClient
	// usageClient writes and reads the usage series (RedisOptions.UsageClient,
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
	metrics  *storeMetrics
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
	argsMu     sync.Mutex                           // serialises writers of args
	args       atomic.Pointer[map[Limit]*limitArgs] // copied on write: reads take no lock
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

func (s *RedisStore) getCall() *redisCall {
	if c, ok := s.calls.Get().(*redisCall); ok {
		return c
	}
	return &redisCall{done: make(chan struct{}, 1)}
}

func (s *RedisStore) putCall(c *redisCall) {
	clear(c.keys)
	clear(c.limits)
	c.keys, c.limits, c.reply, c.err, c.now = c.keys[:0], c.limits[:0], c.reply[:0], nil, ""
	c.next, c.count = nil, 0
	c.batch.Store(0)
	s.calls.Put(c)
}

// NewRedisStore loads the decision script into Redis (SCRIPT LOAD, waiting at
// most one second) and starts the pipeline workers. An unreachable Redis is
// not an error here: the store starts anyway, decisions fail with
// ErrStoreUnavailable until Redis answers, and the script is loaded again on
// the first NOSCRIPT reply, so a portal can start while Redis is down and its
// failure mode governs meanwhile. It fails when Redis answers but rejects the
// script, or when opts.Registerer holds conflicting metrics.
func NewRedisStore(client redis.UniversalClient, opts RedisOptions) (*RedisStore, error) {
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redis store: key prefix %q contains a brace, which would displace the subject's hash tag", opts.Prefix)
	}
	m, err := newStoreMetrics(opts.Registerer, "redis")
	if err != nil {
		return nil, err
	}
	sum := sha1.Sum([]byte(decideScript))
	s := &RedisStore{
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
		s.timeout = DefaultStoreTimeout
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
	if err := s.load(ctx); err != nil && !errors.Is(err, ErrStoreUnavailable) {
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
func (s *RedisStore) Close() error {
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

var errStoreClosed = fmt.Errorf("%w: store closed", ErrStoreUnavailable)

func (s *RedisStore) load(ctx context.Context) error {
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
// NewRedisStore would have: a Redis found too old is refused for good, every
// decision failing with ErrStoreUnavailable and the reason (the failure mode
// then governs), rather than with the script's error on each call.
func (s *RedisStore) reload(ctx context.Context) error {
	if err := s.load(ctx); err != nil {
		return err
	}
	if s.versionChecked.Load() {
		return nil
	}
	if err := s.checkVersion(ctx); err != nil {
		err = fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
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
func (s *RedisStore) checkVersion(ctx context.Context) error {
	err := s.client.Do(ctx, "PEXPIRE", s.prefix+"{version-check}", 1, "GT").Err()
	var rerr redis.Error
	if err != nil && errors.As(err, &rerr) {
		return fmt.Errorf("redis store: Redis 7.0 or later is required (PEXPIRE with GT): %w", err)
	}
	return nil
}

// Timeout is the most one decision waits, queueing included, before it
// fails with ErrStoreUnavailable (RedisOptions.Timeout). A FailoverStore
// in front of the store relies on it instead of a deadline of its own when
// it is no longer than its own timeout.
func (s *RedisStore) Timeout() time.Duration { return s.timeout }

// ScriptSHA returns the SHA1 of the decision script, for tools such as
// redis-benchmark that call it directly with EVALSHA.
func (s *RedisStore) ScriptSHA() string { return s.sha }

// Allow checks and consumes every limit of req in one script call (see Store).
func (s *RedisStore) Allow(ctx context.Context, req Request) (Decision, error) {
	return s.decide(ctx, req, true, nil)
}

// AllowInto is Allow writing Decision.Layers into layers' backing array when
// it is large enough, so a caller that reuses one slice (the middleware)
// spares an allocation per decision.
func (s *RedisStore) AllowInto(ctx context.Context, req Request, layers []LayerResult) (Decision, error) {
	return s.decide(ctx, req, true, layers)
}

// Peek evaluates req as Allow would, consuming and counting nothing:
// Allowed says whether Allow would admit it now, Remaining and ResetAfter
// describe the current state.
func (s *RedisStore) Peek(ctx context.Context, req Request) (Decision, error) {
	if hasConcurrency(req.Limits) {
		return s.peekAll(ctx, req) // slots_redis.go
	}
	return s.decide(ctx, req, false, nil)
}

func (s *RedisStore) decide(ctx context.Context, req Request, consume bool, layers []LayerResult) (Decision, error) {
	if err := validateRequest(req); err != nil {
		return Decision{}, err
	}
	if refused := s.refused.Load(); refused != nil {
		return Decision{}, *refused
	}
	var negKey negativeKey
	clock := s.clock()
	cached := consume && s.negative != nil
	if cached {
		negKey = negativeKey{req.Subject, req.Key, req.Route}
		if d, ok := s.negative.get(negKey, req.Limits, clock); ok {
			if s.usage {
				s.tally.add(req.Subject, req.Route, usageBucketStart(clock.Unix()), false, req.Key != "")
			}
			s.metrics.count(false)
			return d, nil
		}
	}
	call, err := s.prepare(req, consume, clock)
	if err != nil {
		return Decision{}, err
	}
	if err := s.do(ctx, call); err != nil {
		return Decision{}, err
	}
	reply := call.reply
	if len(reply) != 3+4*len(req.Limits) {
		s.putCall(call)
		return Decision{}, fmt.Errorf("rate-limit script: reply of %d values for %d limits", len(reply), len(req.Limits))
	}
	if cap(layers) < len(req.Limits) {
		layers = make([]LayerResult, len(req.Limits))
	}
	d := Decision{
		Allowed: reply[0] == 1,
		Delay:   micros(reply[1]),
		At:      time.UnixMicro(reply[2]),
		Layers:  layers[:len(req.Limits)],
	}
	for i, l := range req.Limits {
		r := reply[3+4*i:]
		d.Layers[i] = layerOut{allowed: r[0] == 1, remaining: r[1], reset: r[2], retry: r[3]}.result(l)
		if l.Algorithm == Quota {
			s, e := periodBounds(periodCode(l.Period), reply[2], anchorMicros(req.Anchor))
			d.Layers[i].Period = micros(e - s)
		}
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
	s.metrics.count(d.Allowed)
	return d, nil
}

// negativeCache holds rejections that cannot turn into admissions before
// their RetryAfter (see RedisOptions.NegativeCacheSize).
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
	decision  Decision
}

func (c *negativeCache) get(key negativeKey, limits []Limit, now time.Time) (Decision, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if ok && !now.Before(e.until) {
		delete(c.entries, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok || len(e.decision.Layers) != len(limits) {
		return Decision{}, false
	}
	for i, l := range limits {
		if e.decision.Layers[i].Limit != l {
			return Decision{}, false
		}
	}
	elapsed := now.Sub(e.at)
	d := Decision{Layers: make([]LayerResult, len(limits))}
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
func (c *negativeCache) put(key negativeKey, limits []Limit, d Decision, now time.Time) {
	var wait time.Duration
	for _, l := range d.Layers {
		if l.Allowed {
			continue
		}
		if l.Limit.Mode != ModeReject && l.Limit.Mode != "" {
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
func (s *RedisStore) prepare(req Request, consume bool, clock time.Time) (*redisCall, error) {
	call := s.getCall()
	keys, limits := call.keys, call.limits
	call.mode = "p"
	if consume {
		call.mode = "a"
	}
	if s.testNow != nil {
		call.now = strconv.FormatInt(clock.UnixMicro(), 10)
	}
	call.bucket = usageBucketStart(clock.Unix())
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
		if la.kind == kindQuota && !req.Anchor.IsZero() {
			la = la.anchored(req.Anchor.UnixMicro())
		}
		if la.kind == kindSlidingLog {
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
	kind  algKind
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
func (s *RedisStore) limitArgs(l *Limit) (*limitArgs, error) {
	var cached map[Limit]*limitArgs
	if m := s.args.Load(); m != nil {
		cached = *m
	}
	if la := cached[*l]; la != nil {
		return la, nil
	}
	p, err := paramsOf(l)
	if err != nil {
		return nil, err
	}
	// The state is named by the limit, and the figures that give it its
	// meaning are stored beside it, so an edit rescales it (see rescale).
	field := l.Name
	var buf [80]byte
	b := append(buf[:0], p.code()...)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.window, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.limit, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.burst, 10)
	la := &limitArgs{kind: p.kind, field: field, args: [8]any{field, codeArg(&p), p.limit, p.window, p.burst, p.cost, string(b), shadowArg(p.shadow)}}
	// A miss copies the map: limits change with plans, rarely, while every
	// decision reads them.
	s.argsMu.Lock()
	var old map[Limit]*limitArgs
	if m := s.args.Load(); m != nil {
		old = *m
	}
	if _, ok := old[*l]; !ok && len(old) < maxCachedLimits {
		next := make(map[Limit]*limitArgs, len(old)+1)
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
func codeArg(p *params) any {
	switch p.kind {
	case kindQuota:
		return p.period
	case kindFixedWindow:
		return codeFixedWindow
	case kindSlidingLog:
		return codeSlidingLog
	case kindSlidingCounter:
		return codeSlidingCount
	case kindTokenBucket:
		return codeTokenBucket
	}
	if p.queue {
		return "lq"
	}
	return codeLeakyBucket
}

func (s *RedisStore) usageKey(subject string, bucket int64) string {
	var digits [20]byte
	return s.prefix + "{" + subject + "}:stats:" + string(strconv.AppendInt(digits[:0], bucket, 10))
}

// do queues call for the next pipeline and waits for its reply, at most
// the store's timeout in all (checked at each tick of watch, so a caller
// gives up between Timeout and 9/8 of it). A shared tick instead of a
// timer per call: Reset and Stop of a pooled timer cost 2 % of the store's
// CPU under 64 callers, and the tick holds even when the Redis client does
// not honour context deadlines on its sockets.
//
// The caller's context is watched only when it has a deadline of its own
// (a FailoverStore's, say), which the wait then honours: a request's
// context from net/http has none, can only be cancelled, and Done would
// allocate its channel for every decision just to let a caller whose
// client has gone return a few hundred microseconds sooner; the decision
// is made by Redis all the same.
func (s *RedisStore) do(ctx context.Context, call *redisCall) error {
	select {
	case <-s.stop:
		s.putCall(call)
		return errStoreClosed
	default:
	}
	start := time.Now()
	var cancelled <-chan struct{}
	if _, ok := ctx.Deadline(); ok {
		cancelled = ctx.Done()
	}
	// The common case, room in the queue, takes a one-channel send instead
	// of a select locking four channels.
	select {
	case s.queue <- call:
		return s.wait(ctx, call, start, cancelled)
	default:
	}
	for {
		select {
		case s.queue <- call:
			return s.wait(ctx, call, start, cancelled)
		case <-*s.tick.Load():
			if time.Since(start) < s.timeout {
				continue
			}
			s.putCall(call)
			// Stuck behind the batches in flight: their failure, not a new one.
			// A timeout like the others: the breaker names the reason by it.
			return &batchError{batch: s.batches.Load(), err: fmt.Errorf("%w: no pipeline free within %s: %w", ErrStoreUnavailable, s.timeout, context.DeadlineExceeded)}
		case <-cancelled:
			s.putCall(call)
			return ctx.Err()
		case <-s.stop:
			s.putCall(call)
			return errStoreClosed
		}
	}
}

// wait waits for the reply to call, queued by do at start.
func (s *RedisStore) wait(ctx context.Context, call *redisCall, start time.Time, cancelled <-chan struct{}) error {
	for {
		select {
		case <-call.done:
			return s.replied(call)
		case <-*s.tick.Load():
			if time.Since(start) < s.timeout {
				continue
			}
			select {
			case <-call.done:
				// The reply is here too: this goroutine ran late (a starved
				// host) and select picks among ready cases at random. The
				// decision is Redis's; do not throw it away.
				return s.replied(call)
			default:
			}
			// The script may still run; the caller treats the decision as
			// unavailable, which the failure mode then governs. The worker
			// still owns call, so it is not pooled. A call still queued waits
			// behind the latest batch, and shares its cause.
			batch := call.batch.Load()
			if batch == 0 {
				batch = s.batches.Load()
			}
			return &batchError{batch: batch, err: fmt.Errorf("%w: no reply within %s: %w", ErrStoreUnavailable, s.timeout, context.DeadlineExceeded)}
		case <-cancelled:
			return ctx.Err()
		}
	}
}

// watch closes and replaces s.tick every tickEvery until the store closes,
// waking the callers that wait so that each checks its deadline.
func (s *RedisStore) watch() {
	defer s.wg.Done()
	ticker := time.NewTicker(s.tickEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			next := make(chan struct{})
			close(*s.tick.Swap(&next))
		case <-s.stop:
			return
		}
	}
}

// replied returns the outcome of call, whose reply has arrived.
func (s *RedisStore) replied(call *redisCall) error {
	if call.err != nil {
		err := call.err
		s.putCall(call)
		return err
	}
	return nil
}

// work sends whatever decisions are queued as one batch, so an idle store
// adds no latency and a busy one shares round trips and script calls.
func (s *RedisStore) work() {
	defer s.wg.Done()
	batch := make([]*redisCall, 0, s.maxBatch)
	w := newBatcher(s.maxBatch)
	var pc *pipeConn
	if s.direct != nil {
		pc = newPipeConn(s.direct, s.timeout)
		defer pc.close()
	}
	last := 0
	for {
		select {
		case c := <-s.queue:
			batch = append(batch[:0], c)
		case <-s.stop:
			return
		}
		if last > 1 {
			// Under concurrency, let the goroutines already runnable (a
			// server's handlers, about to decide) queue their decisions
			// before the batch is cut: fewer, fuller round trips cost Redis
			// and this process fewer system calls per decision. A lone
			// caller never waits for this. (Yielding also whenever the other
			// pipeline was in flight made no difference to the portal's CPU
			// per request, 0.92 - 1.00x over 4 interleaved rounds at load 5.)
			runtime.Gosched()
		}
	fill:
		for len(batch) < s.maxBatch {
			select {
			case c := <-s.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		s.run(batch, w, pc)
		last = len(batch)
		clear(batch)
	}
}

// batcher is a pipeline worker's scratch space: coalesce's leaders, and the
// script calls and their keys, arguments and limits being built.
type batcher struct {
	leaders   []*redisCall
	bySubject map[string]*redisCall
	scripts   []script
	args      []any // the call's arguments: clock, limit count, limits
	reqs      []any // the requests' arguments, appended to args
	numbers   map[*limitArgs]int64
	vals      [][]replyValue // each script call's reply values
	replies   []scriptReply  // the replies read by pipeConn
}

func newBatcher(maxBatch int) *batcher {
	return &batcher{
		leaders:   make([]*redisCall, 0, maxBatch),
		bySubject: make(map[string]*redisCall),
		numbers:   make(map[*limitArgs]int64),
	}
}

// script is one call of the decision script: the requests of
// leaders[from:to], sharing one clock argument.
type script struct{ from, to int }

// coalesce turns a batch into the requests to send: identical Allow calls
// (same subject, limits and clock argument) share one request that the
// script decides k times over, one after the other (mode k), which costs
// Redis one state read and write instead of k. A hot subject (one API key,
// one client IP) is the case this serves; it changes no decision, since k
// requests in one script call run back to back just the same.
func (w *batcher) coalesce(batch []*redisCall) []*redisCall {
	leaders := w.leaders[:0]
	clear(w.bySubject)
	for _, c := range batch {
		c.next, c.count = nil, 1
		if c.mode != "a" {
			leaders = append(leaders, c)
			continue
		}
		l := w.bySubject[c.keys[0]]
		if l != nil && sameCall(l, c) {
			c.next, l.next = l.next, c
			l.count++
			continue
		}
		if l == nil {
			// The subject's first Allow call leads; one with other limits
			// (another route) runs on its own.
			w.bySubject[c.keys[0]] = c
		}
		leaders = append(leaders, c)
	}
	w.leaders = leaders
	return leaders
}

func sameCall(a, b *redisCall) bool {
	return a.now == b.now && a.mode == b.mode && slices.Equal(a.keys, b.keys) && slices.EqualFunc(a.limits, b.limits, sameArgs)
}

// sameArgs reports whether two limits' arguments are the same: the same
// cached pointer, or a key's scoped copies of one limit, built per decision.
func sameArgs(a, b *limitArgs) bool {
	return a == b || (a.field == b.field && a.args == b.args)
}

// group splits leaders into script calls: one for the lot when the client
// is a single Redis, one per leader when keys live on several nodes, and a
// new one wherever the clock argument changes (tests set it per call).
func (w *batcher) group(leaders []*redisCall, onePerScript bool) []script {
	scripts := w.scripts[:0]
	for i, c := range leaders {
		if n := len(scripts); n > 0 && !onePerScript && leaders[scripts[n-1].from].now == c.now {
			scripts[n-1].to = i + 1
			continue
		}
		scripts = append(scripts, script{from: i, to: i + 1})
	}
	w.scripts = scripts
	return scripts
}

func (s *RedisStore) run(batch []*redisCall, w *batcher, pc *pipeConn) {
	start := time.Now()
	deadline := start.Add(s.timeout)
	gen := s.batches.Add(1)
	for _, c := range batch {
		c.batch.Store(gen)
	}
	leaders := w.coalesce(batch)
	scripts := w.group(leaders, s.onePerScript)
	ctx := batchCtx{deadline: deadline}
	defer ctx.done()
	var replies []scriptReply
	scratch := len(scripts) // w.vals in use: a later read of the batch goes past them
	if pc != nil {
		var lost []int
		replies, lost = pc.send(s, w, leaders, scripts, deadline)
		if len(lost) > 0 {
			// Unsent or unanswered on the worker's connection: go-redis
			// sends them, with its own retries, as it would have.
			resend := make([]script, len(lost))
			for j, i := range lost {
				resend[j] = scripts[i]
			}
			for j, r := range s.read(w, s.exec(ctx.get(), w, leaders, resend, s.raw), scratch) {
				replies[lost[j]] = r
			}
			scratch += len(resend)
		}
	} else {
		replies = s.read(w, s.exec(ctx.get(), w, leaders, scripts, s.raw), 0)
	}
	if failed(replies) {
		if retry, at := s.retries(ctx.get(), replies, scripts); len(retry) > 0 {
			// Sent again through go-redis's own reading, whose retries and
			// redirections then apply; the rest keep their replies.
			for j, r := range s.read(w, s.exec(ctx.get(), w, leaders, retry, false), scratch) {
				replies[at[j]] = r
			}
		}
	}
	if s.metrics != nil {
		s.metrics.latency.Observe(time.Since(start).Seconds())
		s.metrics.batch.Observe(float64(len(batch)))
	}
	for i, sc := range scripts {
		deliver(leaders[sc.from:sc.to], replies[i], gen)
	}
}

// batchCtx is a batch's context, made on first use: only a batch that
// go-redis carries needs one, and a context with its timer per batch was
// three of the worker's allocations.
type batchCtx struct {
	deadline time.Time
	ctx      context.Context
	cancel   context.CancelFunc
}

func (b *batchCtx) get() context.Context {
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithDeadline(context.Background(), b.deadline)
	}
	return b.ctx
}

func (b *batchCtx) done() {
	if b.cancel != nil {
		b.cancel()
	}
}

// failed reports whether any of replies is an error.
func failed(replies []scriptReply) bool {
	for _, r := range replies {
		if r.err != nil {
			return true
		}
	}
	return false
}

// retries returns the script calls of replies to send again, and their
// places: after a NOSCRIPT (Redis restarted or SCRIPT FLUSH ran), once the
// script is loaded again, those that did not run; and those that a raw reply
// failed with an error go-redis retries itself (LOADING, READONLY, ...),
// which the script did not run either.
func (s *RedisStore) retries(ctx context.Context, replies []scriptReply, scripts []script) (retry []script, at []int) {
	loaded := false
	for i, r := range replies {
		switch {
		case r.err == nil:
			continue // the common case: HasErrorPrefix allocates even for nil
		case isNoScript(r.err):
			if !loaded {
				if s.reload(ctx) != nil {
					if refused := s.refused.Load(); refused != nil {
						// Too old a Redis: the reason, not NOSCRIPT.
						for j := i; j < len(replies); j++ {
							if replies[j].err != nil && isNoScript(replies[j].err) {
								replies[j].err = *refused
							}
						}
					}
					continue
				}
				loaded = true
			}
		case !r.raw || !retriedByClient(r.err):
			continue
		}
		retry, at = append(retry, scripts[i]), append(at, i)
	}
	return retry, at
}

// retriedByClient reports whether err is a Redis error reply that go-redis
// retries (or redirects) when it reads the reply itself.
func retriedByClient(err error) bool {
	for _, prefix := range [...]string{"LOADING ", "READONLY ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "MOVED ", "ASK "} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// exec sends the script calls, in one pipeline when there are several;
// raw asks for their replies unread (see scriptReply).
func (s *RedisStore) exec(ctx context.Context, w *batcher, leaders []*redisCall, scripts []script, raw bool) []redis.Cmder {
	cmds := make([]redis.Cmder, len(scripts))
	if len(scripts) == 1 {
		cmds[0] = s.evalSha(ctx, s.client, w, leaders[scripts[0].from:scripts[0].to], raw)
		return cmds
	}
	pipe := s.client.Pipeline()
	for i, sc := range scripts {
		cmds[i] = s.evalSha(ctx, pipe, w, leaders[sc.from:sc.to], raw)
	}
	// Each command carries its own error; Exec's is the first of them.
	_, _ = pipe.Exec(ctx)
	return cmds
}

// evalSha queues (or, on a client, runs) one script call deciding reqs
// (see scriptArgs). The command is built here rather than by EvalSha,
// which boxes every key string into its argument list (one allocation per
// decision).
func (s *RedisStore) evalSha(ctx context.Context, c processor, w *batcher, reqs []*redisCall, raw bool) redis.Cmder {
	cmdArgs := s.scriptArgs(nil, w, reqs) // the command's own: go-redis keeps it
	var cmd redis.Cmder
	if raw {
		raw := redis.NewRawCmd(ctx, cmdArgs...)
		raw.SetFirstKeyPos(3)
		cmd = raw
	} else {
		boxed := redis.NewCmd(ctx, cmdArgs...)
		boxed.SetFirstKeyPos(3) // a Cluster client routes the call by its first key
		cmd = boxed
	}
	_ = c.Process(ctx, cmd)
	return cmd
}

// scriptArgs appends to dst the EVALSHA command deciding reqs, all of one
// clock: each distinct limit's eight arguments once, then each request as
// its mode, its limit count and its limits' numbers in that list, so a
// batch of one plan's requests sends Redis three arguments a request
// rather than eight. The keys go in as pointers into the calls, which the
// worker owns until it delivers; w's scratch slices are reused.
func (s *RedisStore) scriptArgs(dst []any, w *batcher, reqs []*redisCall) []any {
	args, rest := w.args[:0], w.reqs[:0]
	clear(w.numbers)
	nkeys := 0
	for _, r := range reqs {
		nkeys += len(r.keys)
	}
	args = append(args, reqs[0].now, nil) // the limit count is set below
	if uniform(reqs) {
		// One plan's requests, the common case: their mode and limits
		// once, 'u' first, instead of three arguments a request.
		first := reqs[0]
		rest = append(rest, "u", first.mode, int64(len(first.limits)))
		for j, la := range first.limits {
			args = append(args, la.args[:]...)
			rest = append(rest, int64(j+1))
		}
		args[1] = int64(len(first.limits))
	} else {
		for _, r := range reqs {
			if r.count > 1 {
				rest = append(rest, int64(r.count))
			} else {
				rest = append(rest, r.mode)
			}
			rest = append(rest, int64(len(r.limits)))
			for _, la := range r.limits {
				j, ok := w.numbers[la]
				if !ok {
					j = int64(len(w.numbers) + 1)
					w.numbers[la] = j
					args = append(args, la.args[:]...)
				}
				rest = append(rest, j)
			}
		}
		args[1] = int64(len(w.numbers))
	}
	dst = slices.Grow(dst, 3+nkeys+len(args)+len(rest))
	dst = append(dst, "evalsha", s.sha, int64(nkeys))
	for _, r := range reqs {
		for i := range r.keys {
			dst = append(dst, &r.keys[i])
		}
	}
	dst = append(dst, args...)
	dst = append(dst, rest...)
	clear(args)
	clear(rest)
	w.args, w.reqs = args[:0], rest[:0]
	return dst
}

// processor is what evalSha sends a command with: a client, or a pipeline
// that queues it.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// uniform reports whether reqs, two or more, share one mode and the same
// limits, none coalesced: the script then takes their mode and limits once
// for the lot (see decide.lua), which spares Redis two arguments a request
// to parse and convert, and the script the reading of them.
func uniform(reqs []*redisCall) bool {
	if len(reqs) < 2 {
		return false
	}
	first := reqs[0]
	for _, r := range reqs {
		if r.count > 1 || r.mode != first.mode || !slices.EqualFunc(r.limits, first.limits, sameArgs) {
			return false
		}
	}
	return true
}

// deliver hands each request of one script call its values from the
// reply ({now, then per request and coalesced call: allowed, delay, four per
// limit}, or an error in place of a request's values) and signals its
// callers. Each caller's reply is allowed, delay, now, four per limit. An
// error carries the batch's number, gen: the calls failed together.
func deliver(reqs []*redisCall, reply scriptReply, gen uint64) {
	values, err := reply.vals, reply.err
	var now int64
	if err == nil {
		now, values = values[0].n, values[1:]
	} else {
		err = &batchError{batch: gen, err: err}
	}
	for _, l := range reqs {
		callErr := err
		var mine []replyValue
		per := 2 + 4*len(l.limits) // values of one decision
		if callErr == nil {
			switch {
			case len(values) > 0 && values[0].err != nil:
				callErr = &batchError{batch: gen, err: classify(values[0].err)}
				values = values[1:]
			case len(values) < per*l.count:
				callErr = fmt.Errorf("rate-limit script: reply too short: %d values left for %d calls of %d limits", len(values), l.count, len(l.limits))
				err = callErr // the rest of the reply cannot be trusted
			default:
				mine, values = values[:per*l.count], values[per*l.count:]
			}
		}
		j := 0
		for c := l; c != nil; j++ {
			next := c.next // c belongs to its caller again once signalled
			c.err = callErr
			if callErr == nil {
				c.reply, c.err = appendValues(c.reply[:0], mine[j*per:(j+1)*per], now)
			}
			c.done <- struct{}{}
			c = next
		}
	}
}

// batchError is the failure of a call that failed with the rest of its
// batch (one script call or pipeline, or the queue behind one): a
// FailoverStore counts the failures of one batch as one, so one stalled
// round trip under 64 callers is not taken for 64 failures.
type batchError struct {
	batch uint64
	err   error
}

func (e *batchError) Error() string { return e.err.Error() }
func (e *batchError) Unwrap() error { return e.err }

// FailureCause is the number of the batch, shared by its calls' errors.
func (e *batchError) FailureCause() uint64 { return e.batch }

// scriptReply is one script call's reply, read into the batcher's scratch
// values: an integer each, or the error a request failed with in its place.
// raw says it was read by parseReply rather than by go-redis.
type scriptReply struct {
	vals []replyValue
	err  error
	raw  bool
}

type replyValue struct {
	n   int64
	err error
}

// read reads the replies of cmds into w's scratch values from the first
// on (a batch's replies are 0 to its script count: another read of the
// same batch starts past them, so as not to overwrite them).
func (s *RedisStore) read(w *batcher, cmds []redis.Cmder, first int) []scriptReply {
	replies := make([]scriptReply, len(cmds))
	for len(w.vals) < first+len(cmds) {
		w.vals = append(w.vals, nil)
	}
	for j, cmd := range cmds {
		i := first + j
		var r scriptReply
		switch cmd := cmd.(type) {
		case *redis.RawCmd:
			raw, err := cmd.Result()
			if err != nil {
				r = scriptReply{err: classify(err), raw: true}
				break
			}
			r = rawReply(raw, w.vals[i][:0])
		case *redis.Cmd:
			r.vals, r.err = replyValues(cmd, w.vals[i][:0])
			r.checkStart()
		}
		w.vals[i] = r.vals
		replies[j] = r
	}
	return replies
}

// rawReply is the reply parsed from its RESP bytes by parseReply into dst.
func rawReply(raw []byte, dst []replyValue) scriptReply {
	r := scriptReply{raw: true}
	r.vals, r.err = parseReply(raw, dst)
	if rerr, ok := r.err.(replyError); ok {
		r.err = classify(rerr) // as go-redis's reading would have it
	}
	r.checkStart()
	return r
}

// checkStart fails a reply that does not start with the decisions' time.
func (r *scriptReply) checkStart() {
	if r.err == nil && (len(r.vals) == 0 || r.vals[0].err != nil) {
		r.err = errors.New("rate-limit script: reply does not start with the decisions' time")
	}
}

// parseReply parses the script's reply from its RESP bytes: an array of
// integers, with an error reply in place of a failed request's values.
// go-redis's own reading boxes every integer of the reply into an
// interface, one allocation per value above 255 (two or more per
// decision); a top-level error reply comes back as that error, for classify.
func parseReply(raw []byte, dst []replyValue) ([]replyValue, error) {
	line, raw := cutLine(raw)
	if len(line) == 0 {
		return dst, errors.New("rate-limit script: empty reply")
	}
	switch line[0] {
	case '-':
		return dst, replyError(line[1:])
	case '*':
	default:
		return dst, fmt.Errorf("rate-limit script: reply of RESP type %q, want an array", line[0])
	}
	n, ok := parseInt(line[1:])
	if !ok || n < 0 {
		return dst, fmt.Errorf("rate-limit script: bad array header %q", line)
	}
	for range n {
		line, raw = cutLine(raw)
		if len(line) == 0 {
			return dst, errors.New("rate-limit script: reply cut short")
		}
		switch line[0] {
		case ':':
			v, ok := parseInt(line[1:])
			if !ok {
				return dst, fmt.Errorf("rate-limit script: bad integer %q in reply", line)
			}
			dst = append(dst, replyValue{n: v})
		case '-':
			dst = append(dst, replyValue{err: replyError(line[1:])})
		default:
			return dst, fmt.Errorf("rate-limit script: reply element of RESP type %q, want an integer", line[0])
		}
	}
	return dst, nil
}

// cutLine returns raw's first line without its CRLF, and the rest.
func cutLine(raw []byte) (line, rest []byte) {
	i := bytes.IndexByte(raw, '\n')
	if i < 1 || raw[i-1] != '\r' {
		return nil, nil
	}
	return raw[:i-1], raw[i+1:]
}

// parseInt parses a RESP integer without the allocation strconv's would
// cost for the string conversion.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if n < 0 { // overflowed past 19 digits' range
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// replyError is an error reply read by parseReply; like go-redis's own it is
// a redis.Error, which classify and the NOSCRIPT check recognise.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as an error Redis answered with.
func (replyError) RedisError() {}

// replyValues reads the script's reply as go-redis read it, checking that it
// is an array of integers and errors.
func replyValues(cmd *redis.Cmd, dst []replyValue) ([]replyValue, error) {
	v, err := cmd.Result()
	if err != nil {
		return dst, classify(err)
	}
	values, ok := v.([]any)
	if !ok {
		return dst, fmt.Errorf("rate-limit script: reply %T, want an array", v)
	}
	for _, x := range values {
		switch x := x.(type) {
		case int64:
			dst = append(dst, replyValue{n: x})
		case error:
			dst = append(dst, replyValue{err: x})
		default:
			return dst, fmt.Errorf("rate-limit script: reply element %T, want an integer", x)
		}
	}
	return dst, nil
}

// appendValues appends one decision's reply to dst in the caller's layout:
// allowed and delay, then now, then the layers.
func appendValues(dst []int64, values []replyValue, now int64) ([]int64, error) {
	for i, x := range values {
		if x.err != nil {
			return dst, fmt.Errorf("rate-limit script: reply element is an error, want an integer: %w", x.err)
		}
		dst = append(dst, x.n)
		if i == 1 {
			dst = append(dst, now)
		}
	}
	return dst, nil
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// classify wraps err in ErrStoreUnavailable unless Redis answered with an
// error that says the script or the data is wrong (a bug, not an outage).
func classify(err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if (strings.HasPrefix(msg, "ERR") && !strings.Contains(msg, "max number of clients")) ||
			strings.HasPrefix(msg, "WRONGTYPE") {
			return fmt.Errorf("rate-limit script: %w", err)
		}
	}
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
}

// flushEvery adds the usage counted in memory to Redis every usageFlush
// until the store closes.
func (s *RedisStore) flushEvery() {
	defer s.wg.Done()
	tick := time.NewTicker(s.usageFlush)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.usageFlush)
			_ = s.flushUsage(ctx) // kept for the next flush; Redis trouble shows in decisions
			cancel()
		case <-s.stop:
			return
		}
	}
}

// flushUsage adds the pending usage counts to their Redis hashes in one
// pipeline, setting each hash's TTL; on failure the counts are kept for the
// next flush (up to maxPendingUsage).
func (s *RedisStore) flushUsage(ctx context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	counts := s.tally.take()
	if len(counts) == 0 {
		return nil
	}
	s.written = foldOthers(counts, s.written, s.usageTop, usageBucketStart(s.clock().Unix()))
	pipe := s.usageClient.Pipeline()
	ttl := UsageRetention
	expired := make(map[string]bool, len(counts))
	for k, c := range counts {
		key := s.usageKey(k.subject, k.bucket)
		if c.admitted > 0 {
			pipe.HIncrBy(ctx, key, k.route+"\x00a", c.admitted)
		}
		if c.rejected > 0 {
			pipe.HIncrBy(ctx, key, k.route+"\x00r", c.rejected)
		}
		if !expired[key] {
			expired[key] = true
			pipe.Expire(ctx, key, ttl)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.tally.restore(counts)
		return fmt.Errorf("write usage: %w", classify(err))
	}
	return nil
}

// Usage returns the usage of subjects in the buckets that end after since
// (at most UsageRetention back), ordered by subject, route and bucket. All
// buckets are read in one pipeline.
func (s *RedisStore) Usage(ctx context.Context, subjects []string, since time.Time) ([]UsagePoint, error) {
	if s.usage {
		// This store's own counts are exact; other instances' lag at most
		// their UsageFlush.
		if err := s.flushUsage(ctx); err != nil {
			return nil, err
		}
	}
	to := usageBucketStart(s.clock().Unix())
	from := max(usageBucketStart(since.Unix()), to-int64(UsageRetention/time.Second))
	step := int64(UsageBucket / time.Second)
	type read struct {
		subject string
		bucket  int64
		cmd     *redis.MapStringStringCmd
	}
	var reads []read
	pipe := s.usageClient.Pipeline()
	for _, subject := range subjects {
		if err := validateRequest(Request{Subject: subject, Limits: []Limit{{}}}); err != nil {
			return nil, err
		}
		for b := from; b <= to; b += step {
			reads = append(reads, read{subject, b, pipe.HGetAll(ctx, s.usageKey(subject, b))})
		}
	}
	if len(reads) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read usage: %w", classify(err))
	}
	var points []UsagePoint
	for _, r := range reads {
		byRoute := map[string]*UsagePoint{}
		for field, v := range r.cmd.Val() {
			route, kind, ok := cutLast(field, "\x00")
			if !ok {
				continue
			}
			count, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("read usage of %q: field %q: %w", r.subject, field, err)
			}
			p := byRoute[route]
			if p == nil {
				p = &UsagePoint{Subject: r.subject, Route: route, Bucket: time.Unix(r.bucket, 0).UTC()}
				byRoute[route] = p
			}
			switch kind {
			case "a":
				p.Admitted = count
			case "r":
				p.Rejected = count
			}
		}
		for _, p := range byRoute {
			points = append(points, *p)
		}
	}
	sortUsage(points)
	return points, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
