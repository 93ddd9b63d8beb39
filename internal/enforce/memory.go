package enforce

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// MemoryOptions configures a MemoryStore; the zero value is ready for
// production.
type MemoryOptions struct {
	// Now is the clock; tests inject a fake one. The default is the
	// system's wall clock as time.Now gives it, read more cheaply: one
	// monotonic clock read per decision, re-anchored on time.Now every
	// second, so a stepped system clock is followed within a second.
	Now func() time.Time
	// Shards is the number of partitions of the subjects' index (default
	// 64, rounded up to a power of two), each with its own lock for adding
	// and sweeping subjects; a decision takes only its subject's lock.
	Shards int
	// SweepInterval bounds how long idle state can linger before a shard
	// drops it (default one minute). Shards also sweep whenever they have
	// doubled in size since the last sweep.
	SweepInterval time.Duration
	// DisableUsage turns off the usage series read by Usage.
	DisableUsage bool
	// MaxSubjects bounds the subjects held at once (default
	// DefaultMaxSubjects, rounded up to a multiple of Shards), so a flood of
	// new callers costs bounded memory.
	// A new subject beyond it evicts others, in this order: subjects whose
	// limits no longer hold any state (only their usage series is lost),
	// then the least recently seen of those under every limit (they start
	// afresh), and only when every subject is at or over a limit, the one
	// whose reset is nearest, counted in
	// sluice_memory_evictions_total{reason="over_limit"}. A subject at or
	// over a limit is thus never forgotten before its reset while any other
	// can go.
	MaxSubjects int
	// Registerer, when set, receives the decision counters and
	// sluice_memory_evictions_total{reason}.
	Registerer prometheus.Registerer
}

// DefaultMaxSubjects is MemoryOptions.MaxSubjects's default: some 17 MB
// of state and usage series for the demo's anonymous tiers
// (BenchmarkMemoryStoreFlood: 17 MB after 100,000 new subjects, 24 MB
// before the subject state shrank to 128 bytes, and 44 MB and growing with
// the subjects before the bound).
const DefaultMaxSubjects = 50_000

// MemoryStore is the single-instance Store: every algorithm's state in
// process memory, one lock per subject, found through an index that
// decisions read without locking (see memShard). State is dropped once it
// no longer affects any decision (and its usage series has aged out), so
// memory stays bounded by the subjects active within the longest window or
// UsageRetention.
// It is safe for concurrent use.
//
// A limit slice passed again and again (a plan's limits from an immutable
// snapshot) is validated once: the store remembers it by the address of its
// first element and checks on each use that its contents are unchanged, so
// editing a slice in place is still seen, only more slowly.
type MemoryStore struct {
	now    func() time.Time // nil: wall
	wall   wallClock
	seed   maphash.Seed
	keys   [4]uint64 // hash's keys for short subjects
	shards []memShard
	// shardShift takes a hash's top bits as its shard's index; the probe
	// in the shard's table starts from the low bits (see locate).
	shardShift uint
	sets       limitSetCache
	routes     routeNames
	sweepEvery int64 // µs
	usage      bool
	metrics    *storeMetrics
	// shardMax is MaxSubjects spread over the shards: a shard at it evicts
	// before adding a subject.
	shardMax  int64
	evictions *evictionMetrics
	// slots holds the concurrency limits' slots (slots_memory.go).
	slots memSlots
}

// memShard indexes its subjects in an open-addressing table that a decision
// reads without a lock: a decision locks only its subject, so decisions on
// different subjects write no memory in common. (A lock per shard, taken by
// every decision, moved its cache line between the cores each time: 1.5x
// x/time/rate's time in parallel over 100,000 keys, against 1.2x serially.)
// The shard's lock serialises what changes the table: inserts, sweeps and
// resizes. A reader may hold a table a resize has replaced, or a subject a
// sweep has removed; a removed subject is marked dead under its own lock, so
// a decision that finds it dead looks again.
type memShard struct {
	mu    sync.Mutex
	table atomic.Pointer[subjectTable]
	live  atomic.Int64 // subjects in the table
	// used counts the subjects placed in the table since it was built,
	// under mu: past half its entries the table is rebuilt, which also
	// clears the overflow marks that subjects swept since have left.
	used int
	// hash is the store's hash of a subject, which a rebuild places
	// subjects by (a bucket keeps only a byte of it).
	hash func(string) uint64
	// sweptAt is the latest clock reading a sweep dropped state at, under
	// mu; a subject added later starts with it as its last write, so that a
	// decision whose clock reading is older (read before a delay) reads the
	// clock again instead of deciding on fresh state in a window whose
	// state was just dropped.
	sweptAt int64
	// The shard sweeps idle subjects when it reaches sweepLen subjects (on
	// an insert) or the clock passes sweepAt (µs).
	sweepLen int64
	sweepAt  atomic.Int64
	// 64 bytes: neighbouring shards on separate cache lines.
}

// subjectTable is a shard's table: a power of two of buckets, each one
// cache line holding up to seven subjects, probed bucket by bucket from the
// subject's hash. A lookup reads one line of the table: its bucket's tags
// (a byte of each subject's hash) and the pointer whose tag matches. At
// most half of the entries are used, so a bucket is seldom full and a
// probe seldom goes on to the next.
//
// Against a table of 16-byte slots (a subject's whole hash and its
// pointer), at most half full too, this halves the table's memory (2 MB
// instead of 4 MB for BenchmarkMemoryInterleaved's 100,000 subjects): the
// table's line is the first cache miss of a decision over many subjects,
// and the table and the states together were 17 MB touched per pass
// against x/time/rate's 11.5 MB, on an L3 shared with other processes. The
// slots let fill to seven eighths (2 MB, longer probes) already took that
// benchmark from 1.38 to 1.19x x/time/rate's time (medians of seven
// alternating runs, 2026-12-03), at the cost of the hot key's probe.
type subjectTable struct {
	mask    uint64
	buckets []subjectBucket
}

const (
	bucketEntries = 7
	// bucketOverflowed, in a bucket's tags, marks a bucket that was full
	// when a subject was placed: a probe goes on past it. Only a rebuild
	// clears it.
	bucketOverflowed = 1 << 63
	// tagOnes and tagHighs have a 1 in the lowest and in the highest bit
	// of each entry's tag byte.
	tagOnes  = 0x0001010101010101
	tagHighs = 0x0080808080808080
)

// subjectBucket is one table bucket, a cache line: tags holds entry i's tag
// in byte i (0 when the entry is empty) and bucketOverflowed; subs the
// entries' states. A subject's pointer is stored before its tag, so a
// reader that sees the tag finds the subject, and a reader that finds
// another subject there (a freed entry reused) compares the subject and
// passes on.
type subjectBucket struct {
	tags atomic.Uint64
	subs [bucketEntries]atomic.Pointer[subjectState]
}

// tagOf is the byte of h a bucket keeps, never 0: bits the shard (the top
// ones) and the bucket (the low ones) are not chosen by.
func tagOf(h uint64) uint64 {
	return max(h>>40&0xff, 1)
}

// matching returns the entries of tags whose tag is tag, as the high bit of
// their byte; it may also return entries just above a matching one, which
// the caller's comparison of the subject rejects.
func matching(tags, tag uint64) uint64 {
	x := tags ^ tag*tagOnes
	return (x - tagOnes) &^ x & tagHighs
}

// place puts sub, whose hash is h, in the first bucket with a free entry
// from h's own, marking the full ones it passes. Call it under the shard's
// lock, on a table with a free entry.
func (t *subjectTable) place(h uint64, sub *subjectState) {
	for b := h & t.mask; ; b = (b + 1) & t.mask {
		bk := &t.buckets[b]
		tags := bk.tags.Load()
		if free := matching(tags, 0); free != 0 {
			// The lowest match is exact: a byte is reported past the
			// first match only.
			i := bits.TrailingZeros64(free) / 8
			bk.subs[i].Store(sub) // publishes the state, fully built
			bk.tags.Store(tags | tagOf(h)<<(8*i))
			return
		}
		bk.tags.Store(tags | bucketOverflowed)
	}
}

// remove empties entry i of bucket bk. Call it under the shard's lock.
func (bk *subjectBucket) remove(i int) {
	bk.tags.Store(bk.tags.Load() &^ (0xff << (8 * i)))
	bk.subs[i].Store(nil)
}

const minTableBuckets = 4

func newSubjectTable(buckets int) *subjectTable {
	return &subjectTable{mask: uint64(buckets - 1), buckets: make([]subjectBucket, buckets)}
}

// subjectState is one subject's state, guarded by its own mutex: 128
// bytes, so the allocator's 128-byte size class lays each one on exactly two
// cache lines, holding the state of one limit and the latest usage entry,
// which is all a decision on a one-limit plan reads or writes. Its other
// limits and older usage entries are in extra. (336 bytes before, with two
// limits and a slice of usage series inline: BenchmarkMemoryBytesPerSubject
// went from 491 to 162 bytes a subject, see memory_bench_test.go.) When its
// limits no longer hold state and its usage is past UsageRetention, nothing
// of the subject matters (see expiry).
//
// The first cache line holds everything a decision writes (the lock, last,
// the latest usage entry, the first limit's counter), the second what it
// only reads, unless a limit is exhausted (guard) or the subject gains a
// limit or its extra: a decision on a subject that other cores decide on
// too then takes one line from them, not two, and the read-only line stays
// shared in every core's cache. Against the layout before (lock and
// subject on the first line, counter and usage entry on the second), the
// hot key in parallel went from 1.11 to 1.05x x/time/rate's time (medians
// of 29 alternating runs, BenchmarkMemoryInterleavedParallel, 2026-12-03:
// about the noise between sets of runs; see memory_bench_test.go).
// TestSubjectStateLayout holds the layout.
type subjectState struct {
	// The written line.
	mu   sync.Mutex
	last int64      // µs: the clock reading of the latest write
	use0 usageEntry // the latest usage entry; the older ones are in extra
	// lim0 is the first limit's state (when nlimits > 0), its counter on
	// this line and its key on the next; the others are in extra.limits.
	lim0 limitState

	// The line a decision reads.
	dead bool // swept out of its shard's table: look the subject up again
	// nlimits is how many limit states the subject holds, lim0 first, so
	// that a decision on a one-limit plan does not read extra, whose
	// cache line is not the state's (a miss on every decision over
	// 100,000 subjects once their usage had spilled into it).
	nlimits uint32
	subject string
	// guard is until when a limit is exhausted (µs): the latest decision
	// found a layer with nothing remaining, so forgetting the subject
	// before then would hand it a fresh budget early.
	guard int64
	extra *subjectExtra
}

// subjectExtra is what a subject holds beyond one limit's state and one
// usage entry: allocated by the first decision that needs it.
type subjectExtra struct {
	limits []limitState // the second limit's state onwards
	usage  []usageEntry // the usage entries before use0, oldest first
	inline [1]limitState
	// usageInline holds the first older usage entry, so that a subject's
	// first new bucket costs one allocation, not two (112 bytes, a size
	// class of its own, against 96).
	usageInline [1]usageEntry
}

// more returns sub's extra, making it.
func (sub *subjectState) more() *subjectExtra {
	if sub.extra == nil {
		sub.extra = new(subjectExtra)
		sub.extra.limits = sub.extra.inline[:0]
		sub.extra.usage = sub.extra.usageInline[:0]
	}
	return sub.extra
}

// numLimits is how many limit states sub holds; limitAt(i) is the i-th.
func (sub *subjectState) numLimits() int { return int(sub.nlimits) }

func (sub *subjectState) limitAt(i int) *limitState {
	if i == 0 {
		return &sub.lim0
	}
	return &sub.extra.limits[i-1]
}

// addLimit appends st to sub's limit states and returns where it is kept.
// It may move the states after the first.
func (sub *subjectState) addLimit(st limitState) *limitState {
	sub.nlimits++
	if sub.nlimits == 1 {
		sub.lim0 = st
		return &sub.lim0
	}
	ex := sub.more()
	ex.limits = append(ex.limits, st)
	return &ex.limits[len(ex.limits)-1]
}

// held is when sub's last limit state expires (µs): past it only the usage
// series is left. Call it under sub's lock.
func (sub *subjectState) held() int64 {
	var held int64
	for i := range sub.numLimits() {
		held = max(held, sub.limitAt(i).expiry())
	}
	return held
}

// expiry is when nothing of sub matters any more (µs): its limits hold no
// state and its usage is past UsageRetention. It is computed when a sweep
// asks, not kept up to date by every decision. Call it under sub's lock.
func (sub *subjectState) expiry() int64 {
	e := sub.held()
	if !sub.use0.empty() {
		e = max(e, sub.last+UsageRetention.Microseconds())
	}
	return e
}

// limitState is one limit's state. A limit edited to another window, limit
// or burst keeps its state, rescaled to the new figures at its next admitted
// request (see rescale), as in Redis; key holds the figures it was last
// written under.
//
// The counter comes first, so that a subject's first limit has its counter
// on the state's written cache line and its key and ext on the read one
// (see subjectState).
type limitState struct {
	counter counterState
	key     *limitKey
	// ext holds the scope of a PerKey limit's state and a sliding log's
	// entries; nil for the state of any other limit shared by the whole
	// subject, the common case, which so costs 8 bytes instead of 56.
	ext *limitExt
}

type limitExt struct {
	// scope is the Request.Key of a PerKey limit's state, "" for state
	// shared by the whole subject.
	scope string
	log   logRing
}

func (st *limitState) scope() string {
	if st.ext == nil {
		return ""
	}
	return st.ext.scope
}

// logRing is st's sliding log, or nil when it has none.
func (st *limitState) logRing() *logRing {
	if st.ext == nil {
		return nil
	}
	return &st.ext.log
}

// expiry is when st no longer affects any decision (µs), computed from the
// figures it was written under: a sliding log's newest entry leaves the
// window, a window ends, a bucket is full again.
func (st *limitState) expiry() int64 {
	f := &st.key.figures
	if f.kind == kindSlidingLog {
		r := st.logRing()
		if r == nil || len(r.entries) == 0 {
			return 0
		}
		return r.entries[len(r.entries)-1].ts + f.window
	}
	if !st.counter.has {
		return 0
	}
	return st.counter.expiresAt(&params{kind: f.kind, window: f.window})
}

// limitKey names a limit state and the figures it was written under. A
// state points to the key of the limit set it was created or last found by,
// shared with every other subject, so finding a state compares a pointer
// and, failing that, reads a key that is hot in the cache rather than one
// more line of the subject's own.
type limitKey struct {
	name string
	figures
}

func newLimitKey(l *Limit, p *params) limitKey {
	return limitKey{name: l.Name, figures: figuresOf(p)}
}

const minSweepLen = 64

// shardCount is n (default 64) rounded up to a power of two.
func shardCount(n int) int {
	if n <= 0 {
		n = 64
	}
	c := 1
	for c < n {
		c <<= 1
	}
	return c
}

// NewMemoryStore returns an empty MemoryStore. It starts no goroutines.
// Like prometheus.MustRegister it panics if opts.Registerer already holds a
// different metric under one of its names.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	m, err := newStoreMetrics(opts.Registerer, "memory")
	if err != nil {
		panic(err)
	}
	em, err := newEvictionMetrics(opts.Registerer)
	if err != nil {
		panic(err)
	}
	s := &MemoryStore{
		now:        opts.Now,
		seed:       maphash.MakeSeed(),
		keys:       [4]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64()},
		shards:     make([]memShard, shardCount(opts.Shards)),
		sweepEvery: opts.SweepInterval.Microseconds(),
		usage:      !opts.DisableUsage,
		metrics:    m,
		evictions:  em,
	}
	most := opts.MaxSubjects
	if most <= 0 {
		most = DefaultMaxSubjects
	}
	s.shardMax = int64((most + len(s.shards) - 1) / len(s.shards))
	s.shardShift = uint(64 - bits.TrailingZeros(uint(len(s.shards))))
	s.wall.anchor()
	if s.sweepEvery <= 0 {
		s.sweepEvery = time.Minute.Microseconds()
	}
	for i := range s.shards {
		s.shards[i].table.Store(newSubjectTable(minTableBuckets))
		s.shards[i].sweepLen = minSweepLen
		s.shards[i].hash = s.hash
	}
	return s
}

// Allow checks and consumes every limit of req atomically (see Store).
func (s *MemoryStore) Allow(ctx context.Context, req Request) (Decision, error) {
	return s.decide(&req, true, nil)
}

// Peek evaluates req as Allow would, consuming and recording nothing:
// Allowed says whether Allow would admit it now, Remaining and ResetAfter
// describe the current state.
func (s *MemoryStore) Peek(ctx context.Context, req Request) (Decision, error) {
	if hasConcurrency(req.Limits) {
		return s.peekAll(ctx, req) // slots_memory.go
	}
	return s.decide(&req, false, nil)
}

// AllowInto is Allow writing Decision.Layers into layers' backing array when
// it is large enough, so a caller that reuses one slice decides without
// allocating.
func (s *MemoryStore) AllowInto(ctx context.Context, req Request, layers []LayerResult) (Decision, error) {
	return s.decide(&req, true, layers)
}

// Len reports how many subjects hold state; tests and metrics use it to
// watch the eviction bound.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		n += int(s.shards[i].live.Load())
	}
	return n
}

// locate hashes subject once for both its shard and its key there. The
// shard is the hash's top bits and the table's probe starts from its low
// bits: when both came from the low bits, every key of a shard shared those
// bits, so a shard's keys started their probes on one slot in 64 of its
// table and piled into long chains (100,000 subjects in tables of 16-byte
// slots: 12.2 slots walked per lookup on average, 45 at worst, against
// 0.31 and 19 once fixed; in buckets now 0.01 buckets past the first, 3 to
// 5 at worst; see TestMemoryStoreProbesStayShort). A shift of 64, with one
// shard, gives shard 0.
func (s *MemoryStore) locate(subject string) (*memShard, uint64) {
	h := s.hash(subject)
	return &s.shards[h>>s.shardShift], h
}

// hash is subject's hash under the store's random keys. A subject of at
// most 16 bytes (an API key's id, an IPv4 address) is read as two words,
// overlapping when shorter, that one 128-bit multiplication of each xored
// with a key mixes, folded, and a second one mixes with the length; longer
// subjects go through maphash. Every step is keyed by values drawn at
// random per store, so a caller cannot choose subjects that collide
// without knowing them, as with maphash. The hash precedes the table
// bucket's load, the 100,000-key decision's first cache miss, and maphash
// took 76 instructions of the decision's 910 for a 9-byte subject (its
// call, the runtime's memhash and aeshashbody), this about 25.
func (s *MemoryStore) hash(subject string) uint64 {
	n := len(subject)
	var a, b uint64
	switch {
	case n > 16:
		return maphash.String(s.seed, subject)
	case n >= 8:
		a, b = le64(subject), le64(subject[n-8:])
	case n >= 4:
		a, b = uint64(le32(subject)), uint64(le32(subject[n-4:]))
	case n > 0:
		a = uint64(subject[0])<<16 | uint64(subject[n/2])<<8 | uint64(subject[n-1])
	}
	hi, lo := bits.Mul64(a^s.keys[0], b^s.keys[1])
	hi, lo = bits.Mul64(hi^lo^s.keys[2], uint64(n)^s.keys[3])
	return hi ^ lo
}

// le64 and le32 read s's first 8 and 4 bytes, little-endian; the compiler
// makes each one load.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// get returns the state of subject, whose hash is h, or nil. It takes no
// lock; the state it returns may have been swept since (see memShard).
func (sh *memShard) get(h uint64, subject string) *subjectState {
	return sh.probe(h, subject, true)
}

// candidate returns the first state on h's probe whose tag is h's, or nil:
// likely the subject whose hash is h, which the caller compares under the
// state's lock. A decision on a subject that other cores decide on too then
// fetches the state's line once, for writing, instead of once to compare
// the subject and again to lock it.
func (sh *memShard) candidate(h uint64) *subjectState {
	return sh.probe(h, "", false)
}

// probe walks h's buckets for the first state whose tag is h's and, when
// compare is set, whose subject is subject.
func (sh *memShard) probe(h uint64, subject string, compare bool) *subjectState {
	t := sh.table.Load()
	tag := tagOf(h)
	b := h & t.mask
	for range len(t.buckets) {
		bk := &t.buckets[b]
		tags := bk.tags.Load()
		for m := matching(tags, tag); m != 0; m &= m - 1 {
			if sub := bk.subs[bits.TrailingZeros64(m)/8].Load(); sub != nil && (!compare || sub.subject == subject) {
				return sub
			}
		}
		if tags&bucketOverflowed == 0 {
			return nil
		}
		b = (b + 1) & t.mask
	}
	return nil
}

// add returns the state of subject, creating it when the table has none,
// first sweeping the shard if it has doubled since the last sweep
// (amortised O(1) per insert), and growing the table past half full.
func (sh *memShard) add(h uint64, subject string, now, every, most int64, em *evictionMetrics) *subjectState {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sub := sh.get(h, subject); sub != nil {
		return sub
	}
	if sh.live.Load() >= sh.sweepLen {
		sh.sweep(now, every)
	}
	if sh.live.Load() >= most {
		sh.evict(now, most, em)
	}
	t := sh.table.Load()
	if 2*(sh.used+1) > bucketEntries*len(t.buckets) {
		t = sh.rebuild()
	}
	sub := &subjectState{subject: subject, last: sh.sweptAt}
	t.place(h, sub)
	sh.used++
	sh.live.Add(1)
	return sub
}

// rebuild replaces the table with one holding only the live subjects, at
// most half full, and returns it. Readers of the old table still find what
// it held.
func (sh *memShard) rebuild() *subjectTable {
	old := sh.table.Load()
	n := minTableBuckets
	for bucketEntries*n < 2*int(sh.live.Load()+1) {
		n <<= 1
	}
	t := newSubjectTable(n)
	for b := range old.buckets {
		for i := range bucketEntries {
			if sub := old.buckets[b].subs[i].Load(); sub != nil {
				t.place(sh.hash(sub.subject), sub)
			}
		}
	}
	sh.used = int(sh.live.Load())
	sh.table.Store(t)
	return t
}

// clock reads the store's clock in µs since the Unix epoch.
func (s *MemoryStore) clock() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.wall.micros()
}

func (s *MemoryStore) decide(req *Request, consume bool, layers []LayerResult) (Decision, error) {
	var d Decision
	var err error
	if set := s.sets.get(req.Limits); set != nil {
		if consume && set.oneCounter && s.allowOne(&d, req, set, layers) {
			return d, nil
		}
		err = s.decideCompiled(&d, req, set.params, set.keys, consume, layers)
	} else {
		err = s.decideUncached(&d, req, consume, layers)
	}
	if err != nil {
		return Decision{}, err
	}
	return d, nil
}

// decideUncached validates a limit slice the cache does not hold (yet).
func (s *MemoryStore) decideUncached(d *Decision, req *Request, consume bool, layers []LayerResult) error {
	var buf [maxInlineLayers]params
	ps, keys, err := s.sets.compile(req.Limits, buf[:0])
	if err != nil {
		return err
	}
	return s.decideCompiled(d, req, ps, keys, consume, layers)
}

// decideCompiled decides req into d; its limits have params ps and, when
// their set is cached, state keys keys (else nil).
func (s *MemoryStore) decideCompiled(d *Decision, req *Request, ps []params, keys []limitKey, consume bool, layers []LayerResult) error {
	// Scratch space: each layer's stored state (nil when it has none yet),
	// verdict, and, for an admitting counter layer, state after consuming.
	// Go zeroes it on every call, so a one-layer decision, the most common,
	// gets room for one layer, not maxInlineLayers: 160 bytes to clear
	// instead of 640.
	if len(ps) == 1 {
		var states [1]*limitState
		var outs [1]layerOut
		var next [1]counterState
		var cur [1]layerState
		return s.decideWith(d, req, ps, keys, consume, layers, states[:], outs[:], next[:], cur[:])
	}
	var statesBuf [maxInlineLayers]*limitState
	var outsBuf [maxInlineLayers]layerOut
	var nextBuf [maxInlineLayers]counterState
	var curBuf [maxInlineLayers]layerState
	states, outs, next, cur := statesBuf[:], outsBuf[:], nextBuf[:], curBuf[:]
	if len(ps) > maxInlineLayers {
		states, outs, next = make([]*limitState, len(ps)), make([]layerOut, len(ps)), make([]counterState, len(ps))
		cur = make([]layerState, len(ps))
	}
	return s.decideWith(d, req, ps, keys, consume, layers, states, outs, next, cur)
}

// decideWith is decideCompiled with its scratch space, one element per
// layer at least.
func (s *MemoryStore) decideWith(d *Decision, req *Request, ps []params, keys []limitKey, consume bool, layers []LayerResult,
	states []*limitState, outs []layerOut, next []counterState, cur []layerState) error {
	// The clock is read before the lock, which then guards nothing but the
	// state itself.
	now := s.clock()
	anchor := anchorMicros(req.Anchor)
	sh, h := s.locate(req.Subject)
	var route uint32
	if s.usage && consume {
		route = s.routes.id(req.Route) // outside the subject's lock
	}
	var sub *subjectState
	for {
		sub = sh.get(h, req.Subject)
		if sub == nil {
			// A subject with state was valid when the state was made, so
			// only an unknown one is checked.
			if err := validateSubject(req.Subject); err != nil {
				return err
			}
			if strings.ContainsAny(req.Key, "{}") {
				return fmt.Errorf("%w: key %q contains a brace", ErrInvalidRequest, req.Key)
			}
			if !consume || (!s.usage && !admitsFresh(ps, now, anchor)) {
				// Nothing to read, and nothing to write: a peek, or a
				// request that even fresh state rejects (its cost exceeds a
				// limit), which with usage off records nothing.
				break
			}
			sub = sh.add(h, req.Subject, now, s.sweepEvery, s.shardMax, s.evictions)
		}
		sub.mu.Lock()
		if !sub.dead {
			break
		}
		sub.mu.Unlock() // swept meanwhile: look again
	}
	if sub != nil && now < sub.last {
		// A racing request read the clock after this one but wrote first,
		// or a sweep dropped state at a later reading (a subject added
		// since starts at its shard's sweptAt): read it again, so that a
		// subject's state never steps back in time (as when the clock is
		// read under the lock) and no decision counts afresh in a window
		// whose state was dropped.
		now = s.clock()
	}
	allowed := true
	for i := range ps {
		p := &ps[i]
		var key *limitKey
		if keys != nil {
			key = &keys[i]
		}
		st := sub.find(key, req.Limits[i].Name, p, scopeOf(req, i))
		states[i] = st
		cur[i].of(st, p, now)
		evaluate(&cur[i], p, now, anchor, consume, &next[i], &outs[i])
		allowed = allowed && (outs[i].allowed || p.shadow)
	}
	if consume {
		sub.settle(req, ps, keys, states, cur, next, outs, now, anchor, allowed)
		if s.usage {
			sub.recordUsage(route, now, allowed)
		}
		if sub != nil {
			sub.last = max(sub.last, now)
			for i := range ps {
				if !outs[i].allowed || outs[i].remaining <= 0 {
					sub.guard = max(sub.guard, now+outs[i].reset)
				}
			}
		}
	}
	if sub != nil {
		sub.mu.Unlock()
	}
	if consume && now >= sh.sweepAt.Load() {
		sh.mu.Lock()
		if now >= sh.sweepAt.Load() {
			sh.sweep(now, s.sweepEvery)
		}
		sh.mu.Unlock()
	}

	// The results are written outside the lock, which is held only as long
	// as the state needs it. Field by field: a composite literal would be
	// built on the stack and copied; fill writes every field of a layer, so
	// the layers need no zeroing.
	d.Allowed = allowed
	d.Layers = slices.Grow(layers[:0], len(ps))[:len(ps)]
	d.At = time.UnixMicro(now)
	var wait int64
	for i := range ps {
		outs[i].fill(&d.Layers[i], &req.Limits[i])
		if ps[i].queue {
			wait = max(wait, outs[i].wait)
		}
	}
	if consume && allowed {
		d.Delay = micros(wait)
	}
	s.metrics.count(allowed)
	return nil
}

// allowOne is Allow on the most common request, a plan of one counter
// limit (not a sliding log, not PerKey) whose state is its subject's first,
// written under the same name and figures (see adopt): it reads
// and writes that state alone, with none of decideWith's scratch space,
// find, rescaling, commit's checks or a rejection's second pass. It returns
// false, having read and written nothing, when anything else holds (a new
// subject, another state, a clock reading older than the subject's latest
// write), and decideWith decides instead.
//
// A one-limit plan is the one the portal's tiers give. Taking it apart from
// the general path (where it was a branch of decideWith) took the hot key
// from 1,118 instructions a decision to 890-910 (callgrind, usage and
// metrics on), and its time serially from 1.24x x/time/rate's to 1.10x
// (BenchmarkMemoryInterleaved, medians of three alternating runs at load
// average 5, 2026-12-03; see memory_bench_test.go).
func (s *MemoryStore) allowOne(d *Decision, req *Request, set *limitSet, layers []LayerResult) bool {
	sh, h := s.locate(req.Subject)
	sub := sh.candidate(h)
	if sub == nil {
		return false
	}
	var route uint32
	if s.usage {
		route = s.routes.id(req.Route) // outside the subject's lock
	}
	p := &set.params[0]
	// The clock is read before the lock, as in decideWith.
	now := s.clock()
	sub.mu.Lock()
	if sub.subject != req.Subject {
		// Another subject's tag: look the subject up.
		sub.mu.Unlock()
		if sub = sh.get(h, req.Subject); sub == nil {
			return false
		}
		sub.mu.Lock()
	}
	st := &sub.lim0
	if sub.dead || now < sub.last || sub.nlimits == 0 || st.ext != nil || !st.adopt(&set.keys[0]) {
		sub.mu.Unlock()
		return false
	}
	var out layerOut
	var next counterState
	evalCounter(&st.counter, p, now, anchorMicros(req.Anchor), true, &next, &out)
	allowed := out.allowed || p.shadow
	if out.allowed {
		st.counter = next
	}
	if s.usage {
		sub.recordUsage(route, now, allowed)
	}
	sub.last = now
	if !out.allowed || out.remaining <= 0 {
		sub.guard = max(sub.guard, now+out.reset)
	}
	sub.mu.Unlock()
	if now >= sh.sweepAt.Load() {
		sh.mu.Lock()
		if now >= sh.sweepAt.Load() {
			sh.sweep(now, s.sweepEvery)
		}
		sh.mu.Unlock()
	}
	d.Allowed = allowed
	d.Layers = slices.Grow(layers[:0], 1)[:1]
	d.At = time.UnixMicro(now)
	out.fill(&d.Layers[0], &req.Limits[0])
	if allowed && p.queue {
		d.Delay = micros(out.wait)
	}
	s.metrics.count(allowed)
	return true
}

// adopt reports whether st is the state of the limit whose key is key:
// the same key, or one naming the same limit under the same figures (the
// key of another slice of equal limits, such as one a caller builds per
// goroutine or per request), which st then takes, as find does, so that
// the next decision compares pointers only. Without it, two slices of
// equal limits that take turns on a subject sent every other decision to
// decideWith (a third of BenchmarkMemoryStore/Usage/100kKeys/Parallel's
// time, where each goroutine builds its own slice).
func (st *limitState) adopt(key *limitKey) bool {
	if st.key == key {
		return true
	}
	if !sameString(st.key.name, key.name) || st.key.figures != key.figures {
		return false
	}
	st.key = key
	return true
}

// settle writes what the general path decided: every layer's consumed state
// when the request is admitted, else only the states a rejection rescaled.
// sub may be nil only when nothing was admitted.
func (sub *subjectState) settle(req *Request, ps []params, keys []limitKey, states []*limitState, cur []layerState,
	next []counterState, outs []layerOut, now, anchor int64, allowed bool) {
	if allowed {
		// A shadow layer over its limit keeps its rescaled state as after
		// a rejection; before commit, which may move the states.
		sub.keepRescaled(req, ps, keys, states, cur, outs)
		sub.commit(req, ps, keys, states, next, outs, now)
		return
	}
	// All or nothing: the layers that would have admitted report their
	// state untouched.
	for i := range ps {
		if outs[i].allowed {
			evaluate(&cur[i], &ps[i], now, anchor, false, nil, &outs[i])
		}
	}
	sub.keepRescaled(req, ps, keys, states, cur, nil)
}

// admitsFresh reports whether a subject with no state would be admitted by
// every limit. Fresh state is the most a subject can have left, so a request
// it rejects is rejected whatever state another request creates meanwhile.
func admitsFresh(ps []params, now, anchor int64) bool {
	var out layerOut
	var none layerState
	for i := range ps {
		evaluate(&none, &ps[i], now, anchor, false, nil, &out)
		if !out.allowed && !ps[i].shadow {
			return false
		}
	}
	return true
}

// commit writes the consumed state of every layer of an admitted request:
// states[i] is layer i's stored state or nil, next[i] its counter after
// consuming, keys the limit set's keys (nil when it is not cached). It drops
// limit state that no longer matters (a limit renamed or removed from the
// plan) before adding any, so a subject holds no more states than it has
// live limits.
func (sub *subjectState) commit(req *Request, ps []params, keys []limitKey, states []*limitState, next []counterState, outs []layerOut, now int64) {
	fresh := false
	for i := range ps {
		st := states[i]
		if !outs[i].allowed {
			// A shadow limit over its limit lets the request pass and
			// consumes nothing, as if it had rejected.
			continue
		}
		if st == nil {
			fresh = true
			continue
		}
		if key := keyOf(keys, i); st.key != key {
			st.refigure(key, &req.Limits[i], &ps[i])
		}
		st.consume(&ps[i], &next[i], now)
	}
	if !fresh {
		return
	}
	// Appending below may move the states, so the pointers in states are
	// not used past this point.
	sub.dropStale(now)
	for i := range ps {
		if states[i] != nil || !outs[i].allowed {
			continue
		}
		p := &ps[i]
		var key *limitKey
		if keys != nil {
			key = &keys[i]
		} else {
			key = new(newLimitKey(&req.Limits[i], p))
		}
		st := limitState{key: key}
		if scope := scopeOf(req, i); scope != "" {
			st.ext = &limitExt{scope: scope}
		}
		sub.addLimit(st).consume(p, &next[i], now)
	}
}

// keepRescaled stores, after a rejection, the states a decision rescaled to
// new figures (see rescale): a rejection consumes nothing, but the moment a
// state is rescaled is the first decision after the edit, as in Redis, not
// each one until a request is admitted.
// With outs set, only the layers that rejected are kept (the others are
// about to be written by commit).
func (sub *subjectState) keepRescaled(req *Request, ps []params, keys []limitKey, states []*limitState, cur []layerState, outs []layerOut) {
	for i := range ps {
		st, p := states[i], &ps[i]
		if st == nil || st.key.figures == figuresOf(p) || (outs != nil && outs[i].allowed) {
			continue
		}
		st.refigure(keyOf(keys, i), &req.Limits[i], p)
		if c := cur[i].state(); p.kind != kindSlidingLog && c != nil {
			st.counter = *c
		}
	}
}

// scopeOf is the scope of req's layer i: its Key for a PerKey limit, else
// the whole subject.
func scopeOf(req *Request, i int) string {
	if req.Limits[i].PerKey {
		return req.Key
	}
	return ""
}

// consume writes an admitted layer's new state.
func (st *limitState) consume(p *params, next *counterState, now int64) {
	if p.kind == kindSlidingLog {
		if st.ext == nil {
			st.ext = new(limitExt)
		}
		st.ext.log.commit(now, p.window, p.cost)
		return
	}
	st.counter = *next
}

// dropStale removes the limit states that no longer affect any decision.
func (sub *subjectState) dropStale(now int64) {
	n, kept := sub.numLimits(), 0
	for i := range n {
		if st := sub.limitAt(i); st.expiry() > now {
			if kept != i {
				*sub.limitAt(kept) = *st
			}
			kept++
		}
	}
	for i := kept; i < n; i++ {
		*sub.limitAt(i) = limitState{}
	}
	if sub.extra != nil {
		sub.extra.limits = sub.extra.limits[:max(kept-1, 0)]
	}
	sub.nlimits = uint32(kept)
}

// keyOf is layer i's key in a cached limit set, or nil.
func keyOf(keys []limitKey, i int) *limitKey {
	if keys == nil {
		return nil
	}
	return &keys[i]
}

// refigure makes st the state of the limit l, with params p, before an
// admitted request writes it: the state it holds was rescaled for the
// decision (see layerState.of), so only the figures it is stored under change,
// and what another algorithm left is dropped.
func (st *limitState) refigure(key *limitKey, l *Limit, p *params) {
	f := figuresOf(p)
	if st.key.figures == f {
		if key != nil {
			st.key = key // only the pointer was another set's
		}
		return
	}
	if st.key.kind != p.kind {
		st.counter = counterState{}
		if st.ext != nil {
			st.ext.log = logRing{}
		}
	}
	if key == nil {
		key = &limitKey{name: l.Name, figures: f}
	}
	st.key = key
}

// layerState is what a layer decides over: its stored counter, or that
// counter rescaled (scaled, when rescaled is set) because the limit's figures
// changed since it was written, or its sliding log; nil pointers when it has
// none. It holds no pointer to itself, which would move every decision's
// scratch space to the heap.
type layerState struct {
	counter  *counterState
	log      *logRing
	scaled   counterState
	rescaled bool
}

// state is the counter state the layer decides over, or nil.
func (ls *layerState) state() *counterState {
	if ls.rescaled {
		return &ls.scaled
	}
	return ls.counter
}

// of points ls at st's state as a state of p at now (st may be nil).
func (ls *layerState) of(st *limitState, p *params, now int64) {
	ls.counter, ls.log, ls.rescaled = nil, nil, false
	if st == nil {
		return
	}
	f := figuresOf(p)
	switch {
	case st.key.figures == f:
		ls.counter, ls.log = &st.counter, st.logRing()
	case st.key.kind != p.kind:
		// another algorithm's state means nothing to this one
	case p.kind == kindSlidingLog:
		ls.log = st.logRing() // logged times mean the same under any window
	default:
		ls.scaled, ls.rescaled = rescale(st.counter, st.key.figures, p, now), true
	}
}

// evaluate runs one layer's algorithm over its state into out; when commit
// is true and the layer admits, a counter layer's consumed state goes to
// next. Results are written through pointers rather than returned: copying a
// returned struct that was just stored field by field stalls store-to-load
// forwarding on the hot path.
func evaluate(ls *layerState, p *params, now, anchor int64, commit bool, next *counterState, out *layerOut) {
	if p.kind == kindSlidingLog {
		evalSlidingLog(ls.log, p, now, commit, out)
		return
	}
	var none counterState
	c := &none
	if s := ls.state(); s != nil {
		c = s
	}
	evalCounter(c, p, now, anchor, commit, next, out)
}

// evalCounter is evaluate on a counter layer (any algorithm but the sliding
// log), whose state is c.
func evalCounter(c *counterState, p *params, now, anchor int64, commit bool, next *counterState, out *layerOut) {
	switch p.kind {
	case kindTokenBucket:
		evalTokenBucket(c, p, now, commit, next, out)
	case kindFixedWindow:
		evalFixedWindow(c, p, now, commit, next, out)
	case kindSlidingCounter:
		evalSlidingCounter(c, p, now, commit, next, out)
	case kindLeakyBucket:
		evalLeakyBucket(c, p, now, commit, next, out)
	default:
		evalQuota(c, p, now, anchor, commit, next, out)
	}
}

// find returns the state of the limit named name in scope, or nil, whatever
// figures it was written under; key is the limit's key in a cached limit
// set, or nil. A state found by value under the same figures takes key, so
// that the next search compares pointers only.
func (sub *subjectState) find(key *limitKey, name string, p *params, scope string) *limitState {
	if sub == nil {
		return nil
	}
	for i := range sub.numLimits() {
		st := sub.limitAt(i)
		// Most states are the subject's own (scope ""): a length test
		// settles them without a string comparison.
		stScope := st.scope()
		inScope := len(stScope) == len(scope) && (len(scope) == 0 || stScope == scope)
		if st.key == key {
			if inScope {
				return st
			}
			continue
		}
		if inScope && st.key.name == name {
			if key != nil && st.key.figures == figuresOf(p) {
				st.key = key
			}
			return st
		}
	}
	return nil
}

// sweep drops every subject whose state no longer matters, marking it dead
// under its own lock. It runs, under the shard's lock, when the shard has
// doubled since the last sweep or the sweep interval has passed, so idle
// subjects cannot pile up.
func (sh *memShard) sweep(now, every int64) {
	t := sh.table.Load()
	for b := range t.buckets {
		bk := &t.buckets[b]
		for i := range bucketEntries {
			sub := bk.subs[i].Load()
			if sub == nil {
				continue
			}
			sub.mu.Lock()
			if sub.expiry() <= now {
				sub.dead = true
				bk.remove(i)
				sh.live.Add(-1)
			}
			sub.mu.Unlock()
		}
	}
	sh.sweptAt = max(sh.sweptAt, now)
	sh.sweepLen = max(minSweepLen, 2*sh.live.Load())
	sh.sweepAt.Store(now + every)
}

// Usage returns the usage of subjects in the buckets that end after since,
// ordered by subject, route and bucket.
func (s *MemoryStore) Usage(ctx context.Context, subjects []string, since time.Time) ([]UsagePoint, error) {
	from := usageBucketStart(since.Unix())
	var points []UsagePoint
	for _, subject := range subjects {
		sh, h := s.locate(subject)
		if sub := sh.get(h, subject); sub != nil {
			sub.mu.Lock()
			sub.eachUsage(func(e *usageEntry) {
				if start := int64(e.bucket) * usageBucketSeconds; start >= from {
					points = append(points, UsagePoint{
						Subject: subject, Route: s.routes.name(e.route), Bucket: time.Unix(start, 0).UTC(),
						Admitted: int64(e.admitted), Rejected: int64(e.rejected),
					})
				}
			})
			sub.mu.Unlock()
		}
	}
	sortUsage(points)
	return points, nil
}

func sortUsage(points []UsagePoint) {
	sort.Slice(points, func(i, j int) bool {
		a, b := points[i], points[j]
		if a.Subject != b.Subject {
			return a.Subject < b.Subject
		}
		if a.Route != b.Route {
			return a.Route < b.Route
		}
		return a.Bucket.Before(b.Bucket)
	})
}

// limitSetSlots is the size of a store's table of validated limit slices:
// far more than the distinct slices a control plane hands out at once (one
// per plan and route tier), so that collisions stay rare.
const limitSetSlots = 512

// limitSetCache remembers validated limit slices by the address of their
// first element, in a direct-mapped table of limitSetSlots. A slice is
// compiled into the table the second time it is seen, so a caller that
// builds a fresh slice for every request costs no allocation either.
type limitSetCache struct {
	slots [limitSetSlots]limitSetSlot
}

type limitSetSlot struct {
	set atomic.Pointer[limitSet]
	// seen is the first element of the slice last validated here without
	// being compiled; keeping it also keeps its address from being reused.
	seen atomic.Pointer[Limit]
}

// limitSet is a validated limit slice: a copy of its limits as validated,
// to detect a slice edited in place, their params and their state keys.
type limitSet struct {
	first  *Limit
	limits []Limit
	params []params
	keys   []limitKey
	// oneCounter is set for one limit that is neither a sliding log nor
	// PerKey, the plans allowOne decides.
	oneCounter bool
}

// get returns the compiled set of limits when the cache holds this slice
// with these contents, else nil.
func (c *limitSetCache) get(limits []Limit) *limitSet {
	if len(limits) == 0 {
		return nil
	}
	set := c.slots[slotOf(&limits[0])].set.Load()
	if set == nil || set.first != &limits[0] || len(set.limits) != len(limits) {
		return nil
	}
	for i := range limits {
		if !sameLimit(&set.limits[i], &limits[i]) {
			return nil
		}
	}
	return set
}

// compile validates limits, appending their params to buf. The second time
// in a row it sees a slice it caches it and returns the set's params and
// keys; otherwise keys is nil.
func (c *limitSetCache) compile(limits []Limit, buf []params) (ps []params, keys []limitKey, err error) {
	ps, err = compileLimits(limits, buf)
	if err != nil {
		return nil, nil, err
	}
	first := &limits[0]
	slot := &c.slots[slotOf(first)]
	if slot.seen.Load() != first {
		slot.seen.Store(first)
		return ps, nil, nil
	}
	set := &limitSet{first: first, limits: slices.Clone(limits), params: slices.Clone(ps), keys: make([]limitKey, len(ps))}
	for i := range set.keys {
		set.keys[i] = newLimitKey(&set.limits[i], &set.params[i])
	}
	set.oneCounter = len(ps) == 1 && ps[0].kind != kindSlidingLog && !limits[0].PerKey
	slot.set.Store(set)
	return set.params, set.keys, nil
}

// sameLimit reports whether a and b decide alike: every field but Route,
// which the store does not read. Strings are compared by address first, as
// a snapshot's limits share them.
func sameLimit(a, b *Limit) bool {
	return a.Limit == b.Limit && a.Window == b.Window && a.Burst == b.Burst && a.Cost == b.Cost && a.PerKey == b.PerKey &&
		a.Period == b.Period &&
		sameString(a.Name, b.Name) && sameString(string(a.Algorithm), string(b.Algorithm)) &&
		sameString(string(a.Mode), string(b.Mode))
}

func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// slotOf spreads element addresses, which share their low bits, over the
// table (Fibonacci hashing).
func slotOf(first *Limit) uint64 {
	const bits = 9 // log2(limitSetSlots)
	return uint64(uintptr(unsafe.Pointer(first))) * 0x9E3779B97F4A7C15 >> (64 - bits)
}

// wallClock reads the wall clock in µs since the Unix epoch with one
// monotonic clock read (time.Since on a time carrying a monotonic reading)
// instead of time.Now's two (wall and monotonic). It re-reads the wall clock
// every second, so a stepped system clock is followed within a second as it
// would be by time.Now.
type wallClock struct {
	base   time.Time    // carries a monotonic reading
	offset atomic.Int64 // wall-clock ns at base, as last measured
	renew  atomic.Int64 // ns since base when the offset is measured again
}

const wallClockRenew = int64(time.Second)

func (c *wallClock) anchor() {
	c.base = time.Now()
	c.offset.Store(c.base.UnixNano())
	c.renew.Store(wallClockRenew)
}

func (c *wallClock) micros() int64 {
	since := int64(time.Since(c.base))
	if since >= c.renew.Load() {
		now := time.Now()
		since = int64(now.Sub(c.base)) // monotonic
		c.offset.Store(now.UnixNano() - since)
		c.renew.Store(since + wallClockRenew)
	}
	return (c.offset.Load() + since) / int64(time.Microsecond)
}
