// Package memstore is the in-memory Store: every algorithm over a sharded
// table of subjects with bounded size and idle eviction, usage counts,
// concurrency slots and quota adjustments, all on one instance's clock.
package memstore

import (
	"context"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storemetrics"
)

// Options configures a Store; the zero value is ready for
// production.
type Options struct {
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
	// MaxSubjects bounds the subjects held at once (rounded up to a
	// multiple of Shards), so a flood of new callers costs bounded memory.
	// 0 follows the memory the process may use:
	// MaxSubjectsFor(ProcessMemory().Bytes), at least MinMaxSubjects.
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

// Store is the single-instance enforce.Store: every algorithm's state in
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
type Store struct {
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
	metrics    *storemetrics.Metrics
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
// probe seldom goes on to the next. Tags instead of whole hashes halve the
// table (2 MB for 100,000 subjects), whose line is a decision's first cache
// miss over many subjects (docs/benchmarks.md, "Probes, memory per subject
// and locking").
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
// limits and older usage entries are in extra (162 bytes a subject in all,
// BenchmarkMemoryBytesPerSubject). When its limits no longer hold state and
// its usage is past UsageRetention, nothing of the subject matters (see
// expiry).
//
// The first cache line holds everything a decision writes (the lock, last,
// the latest usage entry, the first limit's counter), the second what it
// only reads, so a subject decided on by several cores moves one line
// between them, not two. TestSubjectStateLayout holds the layout.
type subjectState struct {
	// The written line.
	mu   sync.Mutex
	last int64      // µs: the clock reading of the latest write
	use0 usageEntry // the latest usage entry; the older ones are in extra
	// lim0 is the first limit's state (when nlimits > 0), its counter on
	// this line and its key on the next; the others are in extra.limits.
	lim0 limitState

	// The line a decision reads.
	// nlimits is how many limit states the subject holds, lim0 first, so
	// that a decision on a one-limit plan does not read extra, whose
	// cache line is not the state's (a miss on every decision over
	// 100,000 subjects once their usage had spilled into it).
	nlimits uint32
	dead    bool // swept out of its shard's table: look the subject up again
	// The subject's name is kept on this line, so that telling the subject
	// from another whose tag it shares reads no other memory: up to
	// subjectInline bytes in inline (inlineLen of them), a longer name in
	// a copy that long points to (inlineLen 0). Keeping the caller's
	// string instead would make the name an object of its own, allocated
	// when the subject first came: every decision whose request carries a
	// string of its own (a header's value, an address formatted anew) would
	// read one more line to compare it, a cache miss over 100,000
	// subjects, and the store would keep whatever buffer the caller cut
	// it from.
	inlineLen uint8
	inline    [subjectInline]byte
	long      *string
	// guard is until when a limit is exhausted (µs): the latest decision
	// found a layer with nothing remaining, so forgetting the subject
	// before then would hand it a fresh budget early.
	guard int64
	extra *subjectExtra
}

// subjectInline is the longest subject name a state holds in place: 18
// bytes fill the state's second line, and hold "ip:" and any IPv4 address,
// "key:" or "dev:" and an id of 14 digits.
const subjectInline = 18

// newSubjectState returns an empty state of subject, its last write at
// last.
func newSubjectState(subject string, last int64) *subjectState {
	sub := &subjectState{last: last}
	if len(subject) <= subjectInline {
		sub.inlineLen = uint8(len(subject))
		copy(sub.inline[:], subject)
	} else {
		long := strings.Clone(subject)
		sub.long = &long
	}
	return sub
}

// is reports whether sub is the state of subject.
func (sub *subjectState) is(subject string) bool {
	if n := int(sub.inlineLen); n != 0 {
		return len(subject) == n && string(sub.inline[:n]) == subject
	}
	return *sub.long == subject
}

// subject is sub's subject. An inline name is returned in place, without
// copying: its bytes do not change once the state is made.
func (sub *subjectState) subject() string {
	if n := int(sub.inlineLen); n != 0 {
		return unsafe.String(&sub.inline[0], n)
	}
	return *sub.long
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
		e = max(e, sub.last+enforce.UsageRetention.Microseconds())
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
	counter enforce.CounterState
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
	log   enforce.LogRing
}

func (st *limitState) scope() string {
	if st.ext == nil {
		return ""
	}
	return st.ext.scope
}

// logRing is st's sliding log, or nil when it has none.
func (st *limitState) logRing() *enforce.LogRing {
	if st.ext == nil {
		return nil
	}
	return &st.ext.log
}

// expiry is when st no longer affects any decision (µs), computed from the
// figures it was written under: a sliding log's newest entry leaves the
// window, a window ends, a bucket is full again.
func (st *limitState) expiry() int64 {
	f := &st.key.Figures
	if f.Kind == enforce.KindSlidingLog {
		r := st.logRing()
		if r == nil || len(r.Entries) == 0 {
			return 0
		}
		return r.Entries[len(r.Entries)-1].TS + f.Window
	}
	if !st.counter.Has {
		return 0
	}
	return st.counter.ExpiresAt(&enforce.Params{Kind: f.Kind, Window: f.Window})
}

// limitKey names a limit state and the figures it was written under. A
// state points to the key of the limit set it was created or last found by,
// shared with every other subject, so finding a state compares a pointer
// and, failing that, reads a key that is hot in the cache rather than one
// more line of the subject's own.
type limitKey struct {
	name string
	enforce.Figures
}

func newLimitKey(l *enforce.Limit, p *enforce.Params) limitKey {
	return limitKey{name: l.Name, Figures: enforce.FiguresOf(p)}
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

// New returns an empty Store. It starts no goroutines.
// Like prometheus.MustRegister it panics if opts.Registerer already holds a
// different metric under one of its names.
func New(opts Options) *Store {
	m, err := storemetrics.New(opts.Registerer, "memory")
	if err != nil {
		panic(err)
	}
	em, err := newEvictionMetrics(opts.Registerer)
	if err != nil {
		panic(err)
	}
	s := &Store{
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
		most = MaxSubjectsFor(ProcessMemory().Bytes)
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
func (s *Store) Allow(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	return s.decide(&req, true, nil)
}

// Peek evaluates req as Allow would, consuming and recording nothing:
// Allowed says whether Allow would admit it now, Remaining and ResetAfter
// describe the current state.
func (s *Store) Peek(ctx context.Context, req enforce.Request) (enforce.Decision, error) {
	if enforce.HasConcurrency(req.Limits) {
		return s.peekAll(ctx, req) // slots_memory.go
	}
	return s.decide(&req, false, nil)
}

// AllowInto is Allow writing Decision.Layers into layers' backing array when
// it is large enough, so a caller that reuses one slice decides without
// allocating.
func (s *Store) AllowInto(ctx context.Context, req enforce.Request, layers []enforce.LayerResult) (enforce.Decision, error) {
	return s.decide(&req, true, layers)
}

// Len reports how many subjects hold state; tests and metrics use it to
// watch the eviction bound.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		n += int(s.shards[i].live.Load())
	}
	return n
}

// StampsDecisions is true: every decision carries the store's clock reading.
func (s *Store) StampsDecisions() bool { return true }
