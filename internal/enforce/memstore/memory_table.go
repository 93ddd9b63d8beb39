package memstore

import (
	"hash/maphash"
	"math/bits"
)

// locate hashes subject once for both its shard and its key there. The
// shard is the hash's top bits and the table's probe starts from its low
// bits: when both came from the low bits, every key of a shard shared those
// bits, so a shard's keys started their probes on one slot in 64 of its
// table and piled into long chains (100,000 subjects in tables of 16-byte
// slots: 12.2 slots walked per lookup on average, 45 at worst, against
// 0.31 and 19 once fixed; in buckets now 0.01 buckets past the first, 3 to
// 5 at worst; see TestMemoryStoreProbesStayShort). A shift of 64, with one
// shard, gives shard 0.
func (s *Store) locate(subject string) (*memShard, uint64) {
	h := s.hash(subject)
	return &s.shards[h>>s.shardShift], h
}

// hash is subject's hash under the store's random keys. A subject of at
// most 16 bytes (an API key's id, an IPv4 address) is read as two words,
// overlapping when shorter, that one 128-bit multiplication of each xored
// with a key mixes, folded, and a second one mixes with the length; longer
// subjects go through maphash. Every step is keyed by values drawn at
// random per store, so a caller cannot choose subjects that collide
// without knowing them, as with maphash. It spares a hot key's decision
// 90 of its 1,894 instructions (5 %) against maphash for every subject
// (docs/benchmarks.md, "What the code's layout tricks bought").
func (s *Store) hash(subject string) uint64 {
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
			if sub := bk.subs[bits.TrailingZeros64(m)/8].Load(); sub != nil && (!compare || sub.is(subject)) {
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
	sub := newSubjectState(subject, sh.sweptAt)
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
				t.place(sh.hash(sub.subject()), sub)
			}
		}
	}
	sh.used = int(sh.live.Load())
	sh.table.Store(t)
	return t
}

// clock reads the store's clock in µs since the Unix epoch.
func (s *Store) clock() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.wall.micros()
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
