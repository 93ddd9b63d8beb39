package memstore

// BenchmarkMemoryInterleavedParallel is BenchmarkMemoryInterleaved with
// GOMAXPROCS goroutines per round: the memory store (AllowInto, usage
// counting on and its decision counters registered with Prometheus, as the
// portal runs it) beside golang.org/x/time/rate, hot key and 100,000 keys,
// in alternating rounds, reporting medians. No figure is asserted.
//
//	go test -run '^$' -bench 'MemoryInterleaved' -benchtime 10x -count 3 ./internal/enforce
//
// 2026-12-01, issue 17 item 2, a 2-core "Intel(R) Xeon(R) Processor" (as
// /proc/cpuinfo names it) shared with six other engineers' builds, load
// average 11 to 20. Three test binaries run in alternation, four runs each
// of both benchmarks at -benchtime 10x; each cell is the median over the
// four runs of the run's median store / x/time/rate ratio, the range over
// the runs in brackets. "before" is the code at the start of the session,
// "state" the 128-byte subject state (one limit and the latest usage entry
// inline, routes interned, tables rebuilt half full), "now" adds the limit
// count kept in the state, scratch space sized for one layer and decision
// counters striped by goroutine:
//
//	store / x/time/rate    before              state               now
//	hot key, serial        1.23 (0.97 - 2.06)  1.55 (1.30 - 1.67)  1.31 (1.24 - 1.44)
//	100k keys, serial      2.21 (1.84 - 2.65)  1.64 (1.08 - 1.81)  1.42 (1.23 - 2.21)
//	hot key, parallel      1.56 (1.27 - 1.69)  1.46 (1.40 - 1.55)  1.62 (1.39 - 1.81)
//	100k keys, parallel    1.91 (1.60 - 2.44)  1.61 (1.35 - 1.87)  1.35 (1.17 - 1.63)
//
// Three more runs of before and now later that evening, load average 2.5
// to 4.5, medians of three (ranges): before 1.39 (1.28 - 1.67), 1.85
// (1.53 - 2.35), 1.45 (1.40 - 1.54), 1.83 (1.59 - 2.17); now 1.33 (1.25 -
// 1.44), 1.38 (1.36 - 1.71), 1.59 (1.38 - 1.81), 1.30 (1.16 - 1.56), in
// the table's order.
//
// At load 11 to 20 absolute times moved fivefold between runs and one binary's
// ratios by 2x, so only the 100,000-key columns moved beyond the noise;
// the hot key did not, and the 1.0x of issue 17 is not reached in any
// cell. Taken apart (pprof, and rounds of 50,000 decisions of each
// contender interleaved, minimum over 40 rounds), the store's hot key costs
// about 90 ns against x/time/rate's 72: its clock is cheaper (one monotonic
// read, against time.Now's two), but the limit set check, the hash and the
// probe, the usage entry and the decision counter cost more than that
// saves. Over 100,000 keys x/time/rate's map lookup alone took 22 ns, the
// store's hash, probe and lock 40 - 55 ns, a whole decision 240 against
// 150: the table slot and the subject's state are two dependent cache
// misses that a longer decision cannot overlap with the next one's.
//
// 2026-12-02, issue 17 item 2, second pass, the same 2-core Intel Xeon at
// load average 2.9 to 4.6: test binaries of the code before the pass and
// after it alternated, four runs each of both benchmarks at -benchtime 20x;
// each cell is the median over the four runs of the run's median ratio, the
// range in brackets:
//
//	store / x/time/rate    before              after
//	hot key, serial        1.29 (1.28 - 1.32)  1.09 (1.07 - 1.10)
//	100k keys, serial      1.35 (1.34 - 1.43)  1.34 (1.30 - 1.36)
//	hot key, parallel      1.43 (1.42 - 1.52)  1.27 (1.24 - 1.34)
//	100k keys, parallel    1.45 (1.43 - 1.47)  1.46 (1.39 - 1.54)
//
// What moved the hot key: a one-limit counter plan whose state is the
// subject's first (found by its key's pointer, under the same figures)
// skips find, rescaling, commit's checks and a rejection's second pass
// (decideWith). Tried and dropped, each against that code in alternating
// runs: (1) the subject state's fields reordered so that the first cache
// line holds only what a lookup reads (the subject, the limit's key) and the
// second the lock and everything a decision writes (counter, usage entry),
// with last and guard written only when they advance: hot key in parallel
// 1.23 against 1.26 (medians of three runs), but 100,000 keys serially
// 1.42 - 1.49 against 1.33 - 1.38: the lock's compare-and-swap then waits
// for a second missing line that the subject's comparison no longer brought
// in. (2) No
// decision counter at all, to bound what a per-P plain increment could buy:
// hot key serially 1.03 - 1.07 against 1.07 - 1.10, nothing elsewhere, so
// the striped atomic counter stays. (3) The request passed by pointer
// from decide down, not copied twice: within the noise (three runs, hot key
// serially 1.08 - 1.24 against 1.07 - 1.18). The hash is already maphash with a
// per-store seed (5.5 % of the hot key's profile in parallel); a weaker
// hand-rolled one would trade the table's resistance to chosen subjects for
// a few ns. Where the rest goes (pprof): reading the clock is 10 % (100,000
// keys) to 25 % (hot key, parallel) of the store's time, and x/time/rate
// pays it twice; over 100,000 keys the load of the table slot's hash is 26 %
// and the subject comparison, the first touch of the state, 13 %: the
// 4 MB of slots (tables under half full) and 12.8 MB of states are out of
// the 2 MB L2. Reaching 1.0x there needs the state found in one miss (the
// key's hash beside the state's first fields), a change of the index, not
// of the decision.
//
// 2026-12-03, issue 17 item 2, third pass, a 2-core "AMD EPYC" (tsc clock
// source; runtime.nanotime 27 ns, time.Now 53 ns) shared with three other
// helpers, load average 5.4 to 10.5: test binaries of main (2c9cbb4) and of
// this pass alternated, four runs each of both benchmarks at -benchtime
// 10x; each cell is the median over the four runs of the run's median
// ratio (the mean of the middle two), the range in brackets:
//
//	store / x/time/rate    before              after
//	hot key, serial        1.34 (1.18 - 1.48)  1.10 (1.08 - 1.20)
//	100k keys, serial      1.25 (1.10 - 1.30)  1.21 (1.18 - 1.43)
//	hot key, parallel      1.57 (1.47 - 1.79)  1.29 (1.22 - 1.42)
//	100k keys, parallel    1.34 (1.23 - 1.48)  1.39 (1.21 - 1.51)
//
// Callgrind (instructions a decision, usage and metrics on, three store
// seeds): the store's hot key 1,118 - 1,198 before, 890 - 910 after;
// x/time/rate's 439 (100,000 keys: 593, the store about 1,000). What moved:
// tables grown past half full instead of three quarters (a hot key added
// late walked up to 8 slots in the one shard in four sitting just under
// the old threshold) and allowOne, the one-counter-limit plan decided apart
// from decideWith's general path. Tried and dropped: (1) deciding at the
// subject's last write instead of reading the clock again when a racing
// decision wrote first: a clock that steps back then decides otherwise than
// the Redis store (TestRedisSlidingLogAgreesWithMemoryAcrossChunks). (2)
// The limit set's check as one comparison of the Limit's bytes, or as
// struct ==: 928 - 948 and 923 instructions against 890 - 910 (a call to
// memequal costs more than the fields). (3) The subject compared under its
// lock, so a core contending for a hot subject fetches its line once,
// exclusive: hot key in parallel 1.00 against 1.04 (medians of three), but
// over 100,000 keys in parallel 1.59 - 2.10 against 1.56 - 1.66. (4) The
// subject's string header laid across the state's two cache lines, so the
// lookup fetches both: 100,000 keys serially 1.34 (1.15 - 1.45) against
// 1.36 (1.28 - 1.61), within the noise. (3) and a variant that read the
// clock before the lookup (100,000 keys serially 1.26 - 1.57 against
// 1.09 - 1.38) both failed the same way: the clock read (the vDSO's
// lfence-ordered rdtsc) waits for every load before it, so the lookup's
// misses must be issued before it, where they overlap the previous
// decision's tail, as x/time/rate's map lookup precedes its time.Now. Where
// the 100,000-key gap stays (pprof, parallel): the table slot's load costs
// 0.70 s against the map's group match 0.40 s, the subject comparison (the
// state's first touch) 0.28 s against the map's key 0.15 s: 17 MB touched
// per pass (4 MB of slots, 12.8 MB of states) against x/time/rate's
// 11.5 MB, on an L3 shared with the other helpers' builds.
//
// 2026-12-03, issue 17 item 2, fourth pass, the same 2-core AMD EPYC
// shared with other helpers, load average 2.0 to 2.3: test binaries of
// 129bd2b and of this pass alternated, four runs each of both benchmarks
// at -benchtime 10x; each cell is the median over the four runs of the
// run's median ratio (the mean of the middle two), the range in brackets,
// then the store's and x/time/rate's median ns:
//
//	store / x/time/rate    before              after
//	hot key, serial        0.85 (0.85 - 0.86)  0.84 (0.83 - 0.98)   74 / 88 ns
//	100k keys, serial      1.35 (1.34 - 1.39)  1.05 (1.02 - 1.06)  138 / 134 ns (before 198 / 143)
//	hot key, parallel      1.21 (1.21 - 1.25)  1.18 (1.08 - 1.19)  153 / 137 ns
//	100k keys, parallel    1.62 (1.60 - 1.73)  1.36 (1.18 - 1.56)  180 / 133 ns (before 211 / 133)
//
// Three more runs of each at -benchtime 20x, load average 1.6 to 2.5, in
// the same order: hot key serially 0.85 (0.85 - 0.86) before, 1.00 (0.83 -
// 1.02) after, where in two of the runs some other process slowed both
// contenders (x/time/rate's hot key 93 and 103 ns against 89) and five
// more pairs at 5x just after gave 0.85 (0.85 - 0.95) and 0.85 (0.83 -
// 0.85); 100,000 keys serially 1.38 (1.31 - 1.46) and 1.00 (0.81 - 1.01);
// hot key in parallel 1.19 (1.02 - 1.19) and 1.14 (1.09 - 1.16); 100,000
// keys in parallel 1.64 (1.55 - 1.69) and 1.18 (1.10 - 1.25).
// The final code (candidate following the probe past a full bucket)
// against 129bd2b once more, four runs each at 10x, load average 0.8 to
// 1.1, both contenders slower over 100,000 keys than before (x/time/rate
// 170 against 134 ns): hot key serially 0.88 (0.85 - 0.95) and 0.85 (0.84 -
// 0.98), 100,000 keys 1.38 (1.36 - 1.39) and 1.14 (1.07 - 1.20), hot key in
// parallel 1.16 (1.03 - 1.25) and 1.05 (0.86 - 1.15), 100,000 keys in
// parallel 1.52 (1.44 - 1.79) and 1.24 (1.14 - 1.30).
//
// What moved the 100,000 keys: the subject index in buckets of one cache
// line (seven pointers and a byte of each one's hash) instead of 16-byte
// slots, at most half full either way: 2 MB of table for these subjects
// instead of 4 MB. Callgrind does not see it (874 instructions a decision
// against 916, and 3.3 simulated misses against 3.5 with a 1 MB last
// level and no prefetcher): the table and the states (17 MB touched per
// pass before, 15 now, against x/time/rate's 11.5) compete for an L3 and
// a TLB shared with other processes. How it was found: the lookup alone
// (hash, slot, the subject's comparison) over these 100,000 subjects took
// 40 - 80 ns against the map's 34 - 49, though the slot's load alone took
// 24 ns and the state's alone 7; and the slots let fill to seven eighths
// (2 MB, longer probes) took 100,000 keys serially from 1.38 to 1.19
// (medians of seven alternating runs) while the hot key, added last, slowed
// on its longer probe. Each step against the one before, alternating, at
// load 2.5 to 5: the hash of short subjects as two keyed 128-bit
// multiplications instead of maphash (76 instructions to about 25): hot key
// serially 0.85 to 0.83 - 0.84 (three runs at 15x), 100,000 keys within the
// noise; the buckets: 100,000 keys serially 1.23 - 1.26 to 0.92 - 0.97
// (three runs at 15x, load 5), in parallel 1.49 - 1.85 to 1.16 - 1.36 (five
// runs at 20x, against the base), but the hot key in parallel 1.07 to 1.15
// (medians of five); comparing the subject under its lock (allowOne takes
// the first state on the probe whose tag matches, locks it, then compares),
// so a core fetches a contended state's first line once, for writing, not
// shared and then again: hot key in parallel 1.45 - 1.48 against 1.69 -
// 1.76 (three runs; x/time/rate's own time there 56 ns, another process's
// load gone), 100,000 keys in parallel 1.08 - 1.24 against 1.15 - 1.35. Tried and dropped: the
// subject looked up before the limit set's check, so that the check ran in
// the slot's miss: 100,000 keys serially 1.44 - 1.57 against 1.42 - 1.60
// (three runs at 15x), nothing. Bytes per subject at 1,000,000 subjects
// stay 162 (the tables are 512 kB a shard either way, buckets 27 % full).
// Where the rest goes: the hot key in parallel passes both of the state's
// lines between the cores (the lock and last on the first, the counter and
// usage entry on the second); one line would need the counter's 40 bytes
// cut to the token bucket's 16. Over 100,000 keys in parallel the states
// are the bulk of what is touched (12.8 MB against x/time/rate's 8 MB of
// limiters).
//
// 2026-12-03, issue 17 item 2, fifth pass (one written cache line), the
// same 2-core AMD EPYC shared with other helpers, load average 0.2 to 3.5:
// test binaries of main (0c8b416) and of this pass alternated, 29 runs each
// in five sets between 17:06 and 17:51 UTC (-benchtime 10x in the first two
// sets, 40x in the others); each cell is the median over the 29 runs of the
// run's median ratio, the quartiles in brackets, then the range:
//
//	store / x/time/rate    before                             after
//	hot key, serial        0.86 (0.85 - 0.86), 0.84 - 1.02    0.86 (0.86 - 0.87), 0.85 - 1.03
//	100k keys, serial      1.06 (1.04 - 1.09), 0.93 - 1.14    1.06 (1.02 - 1.08), 0.91 - 1.19
//	hot key, parallel      1.11 (1.05 - 1.15), 0.99 - 1.23    1.05 (0.99 - 1.11), 0.82 - 1.21
//	100k keys, parallel    1.14 (1.09 - 1.23), 1.02 - 1.55    1.12 (1.06 - 1.15), 0.98 - 1.46
//
// Set by set (medians of five or six runs) the hot key in parallel went
// 1.17 to 1.12, 1.15 to 1.00, 1.10 to 1.02, 1.11 to 1.06, and in the last
// and quietest set (load 0.2 to 1.7) 1.05 (0.99 - 1.16) to 1.07 (0.95 -
// 1.15): the gain is about the size of the noise between sets. What moved
// it: everything a decision on a one-limit plan writes (lock, last, usage
// entry, counter) on the state's first cache line, what it only reads on
// the second, so a contended decision takes one line from the other core,
// not two. For that the counter state went from 40 to 32 bytes (a bucket
// keeps its tat in prev's place), which also took TwoLimits of
// BenchmarkMemoryBytesPerSubject from 290 to 274 bytes a subject (OneLimit
// stays 162); BenchmarkMemoryStore still allocates nothing per decision.
// Tried and dropped, each beside main and this in one rotation (six runs at
// 40x, load 1.5 to 3.2, unless said): (1) allowOne reading the clock again
// under the lock when a racing decision wrote first, instead of handing the
// decision to decideWith: decideWith's 12 % of a profile of the hot key in
// parallel went, but the time per decision did not (117 ns, the mutex's
// spinning took the difference); hot key in parallel 1.02 (0.95 - 1.07)
// against 1.02 (0.91 - 1.05), 100,000 keys in parallel 1.08 against 1.06.
// (2) The subject compared before the lock (on the read-only line it costs
// a contended decision nothing): hot key in parallel 1.00 against 1.02, but
// 100,000 keys in parallel 1.15 (1.12 - 1.26) against 1.06 (1.00 - 1.12),
// as in the fourth pass: the miss on the state's line then comes before the
// clock read, which waits for it. (3) With (1), the subject compared after
// the clock read and before the lock (five runs at 40x, load 2.4 to 3.5):
// hot key in parallel 1.11 (1.01 - 1.16) against 1.06 (0.97 - 1.11),
// 100,000 keys in parallel 1.13 against 1.15. Where the rest goes: the hot
// key in parallel is bound by the subject's lock (BenchmarkMemoryStore's
// Usage/HotKey/Parallel profile: Lock and its spinning half the samples,
// the clock 15 %), and its critical section holds the token bucket's
// division, floor and ceil for remaining and reset, which only the answer
// needs, after the lock; x/time/rate's own hot key went from 90 - 94 ns
// serially to 135 - 147 ns in parallel in the same runs.
//
// 2026-12-03, issue 17 item 2, sixth pass (the lock's critical section), a
// 2-core "AMD EPYC" (CPUID: "Oxide Virtual Turin-like Processor", clock
// source kvm-clock) shared with other helpers, load average 2.0 to 5.0:
// test binaries of main (18b9b05) and of this pass alternated, 26 runs
// each of both benchmarks at -benchtime 10x between 19:37 and 19:50 UTC;
// each cell is the median over the runs of the run's median ratio, the
// quartiles in brackets, then the range:
//
//	store / x/time/rate    before                             after
//	hot key, serial        0.87 (0.87 - 0.88), 0.85 - 1.02    0.86 (0.85 - 0.88), 0.84 - 1.07
//	100k keys, serial      1.02 (0.99 - 1.05), 0.84 - 1.20    1.00 (0.95 - 1.07), 0.85 - 1.17
//	hot key, parallel      1.02 (1.00 - 1.06), 0.92 - 1.22    1.00 (0.99 - 1.01), 0.89 - 1.20
//	100k keys, parallel    1.11 (1.05 - 1.19), 0.95 - 1.55    1.07 (1.05 - 1.14), 0.98 - 1.28
//
// ("after" is both changes below together.) Every cell moved by less than
// its quartiles: within the noise. A third
// set, ten runs each between 20:00 and 20:02 (load 1.4 to 1.8), reversed
// the hot key in parallel (1.06 before, 1.09 after) and left the rest as
// it was; over all 36 runs each: 0.87 and 0.86 serially, 1.02 and 1.01 over
// 100,000 keys serially, 1.02 (1.00 - 1.09) and 1.00 (0.99 - 1.06) on the
// hot key in parallel, 1.11 (1.04 - 1.20) and 1.09 (1.04 - 1.12) over
// 100,000 keys in parallel. BenchmarkMemoryStore run directly (five runs
// of each at 1s, alternating, a portal benchmark sometimes running beside
// them) was noisier still: Usage/HotKey/Parallel 112 ns before and 114
// after, Usage/100kKeys/Serial 166 and 195 (quartiles 159 - 190 and 176 -
// 206), which the interleaved runs above, taken alike by such load, do
// not show. The two
// changes: (1), not kept: each counter algorithm split into decide, under the
// subject's lock (read and write the state, admit or not), and describe,
// after it (remaining, reset and retry from values decide copied out: for
// the token bucket a division, a floor and a ceil), allowOne describing
// under the lock only when the layer may be exhausted, as the guard needs
// the reset (tally.leaves rules that out exactly, without a division);
// evalCounter is still both in one, so the general path and the Redis
// store's agreement are unchanged. Against main alone, in 32 alternating
// runs between 19:18 and 19:42 (load 1.8 to 7.7, this session's tests
// running in some): hot key in parallel 1.02 (1.00 - 1.09) before, 1.01
// (0.97 - 1.10) after, serially 0.87 (0.86 - 0.91) and 0.85 (0.85 - 0.87).
// The lock's part of a profile of BenchmarkMemoryStore's
// Usage/HotKey/Parallel did not shrink with the critical section (Lock 6.4
// s of 14.6 before, 7.7 s of 14.2 after, the section itself from about 1.2
// s to 0.6 s): the lock is bound by the cache line's hand-off between the
// cores and the waiter's spinning (procyield a quarter of the samples),
// not by what it guards, as x/time/rate's own mutex is in the same runs
// (its hot key 87 - 120 ns serially, 131 - 160 ns in parallel, or 80 - 101
// ns in the runs where another process held one of the cores and the two
// goroutines took turns on the other). The two profiles came from
// different moments (109 and 142 ns a decision), so compare their shares,
// not their seconds. It cost 200 lines of algorithm.go and memory.go for a
// gain within the noise (about 2 % on the serial hot key), so it did not
// land; its test, that allowOne decides exactly as decideWith does
// (memory_one_test.go), landed and holds for the code as it is. (2), kept: allowOne
// adopts a limit key equal by name and figures, as find does: this
// benchmark passes one slice from every goroutine and does not see it, but
// BenchmarkMemoryStore's 100kKeys/Parallel, whose goroutines each build
// their own slice, went from 144 to 106 ns a decision (Usage) and from 151
// to 109 (NoUsage), medians of five alternating runs at 1s, load 2.3 to
// 4.1.
// Where the rest goes, and what was left untried: over 100,000 keys in
// parallel a profile still spends a quarter of its samples on the table
// bucket's tags (the first miss), 15 % on the clock read (which waits for
// it) and 16 % on the lock's compare-and-swap (the state's line, the
// second miss), as in the fourth and fifth passes. In the hot key in
// parallel decideWith (allowOne's fallback when a racing decision wrote
// first) is 7 % of the samples before and 9 % after; reading the clock
// again under the lock instead was tried in the fifth pass and not tried
// again. (The 100,000-key shares are from BenchmarkMemoryStore's
// Usage/100kKeys/Parallel after this pass.)
//
// Figures of 2026-11-30, second session, on a quiet 2-core machine (AMD
// EPYC), medians of rounds, ranges over three runs:
//
//	                      store ns    x/time/rate ns   store / x/time/rate
//	hot key, serial        83 - 96        77 - 78         1.08 - 1.24x
//	100k keys, serial     131 - 134      112 - 121        1.12 - 1.18x
//	hot key, parallel      95 - 97        77 - 79         1.20 - 1.28x
//	100k keys, parallel    71 - 72        60 - 61         1.16 - 1.21x
//
// Before the subject index that decisions read without a lock (same
// session, interleaved with the new code): 100k keys 1.19 - 1.24x serially
// and 1.48 - 1.55x in parallel, where the baseline's workers each touch only
// their own limiters while the store's shared 64 shard locks, whose cache
// lines moved between the cores on every decision; hot key 1.08 - 1.15x and
// 1.14 - 1.16x. Tried first and dropped: 4,096 shards (1.78 - 1.81x in
// parallel: the shard array leaves the cache) and a sync.Map of subjects
// (2.0 - 2.1x, 1.75 - 1.82x serially: its trie is deeper than a table).
// The first session, on a machine loaded by other builds, measured 1.13 -
// 1.45x, 1.11 - 1.28x, 1.34 - 1.61x and 1.24 - 1.42x.
//
// 2026-12-01, a 2-core Intel Xeon at load average 9 to 11, test binaries
// before and after the shard was taken from the hash's top bits run in
// alternation, six runs each: hot key 1.49 - 2.34x before, 1.01 - 1.41x
// after (serial), 1.33 - 2.56x and 1.06 - 1.68x (parallel); 100k keys
// within the noise (0.83 - 1.93x serial, 0.97 - 1.67x parallel, both).

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"golang.org/x/time/rate"
)

func BenchmarkMemoryInterleavedParallel(b *testing.B) {
	const per = 200_000
	workers := runtime.GOMAXPROCS(0)
	subjects := benchSubjects()
	store := portalMemoryStore()
	for _, s := range append(subjects, "key:hot") {
		fillBucket(store, s)
	}
	hot := rate.NewLimiter(rate.Limit(1e12), 1e12)
	limiters := make(map[string]*rate.Limiter, benchKeys)
	for _, s := range subjects {
		limiters[s] = rate.NewLimiter(rate.Limit(1e12), 1e12)
	}
	limits := []enforce.Limit{benchLimit}
	// timeIt runs per decisions split over the workers, worker w taking
	// the indexes w, w+workers, ..., and returns the wall time per decision.
	timeIt := func(f func(layers []enforce.LayerResult, i int)) float64 {
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				layers := make([]enforce.LayerResult, 0, 1)
				for i := w; i < per; i += workers {
					f(layers, i)
				}
			}()
		}
		wg.Wait()
		return float64(time.Since(start).Nanoseconds()) / per
	}
	ctx := context.Background()
	var hotStore, hotRate, hotRatio, manyStore, manyRate, manyRatio []float64
	b.ResetTimer()
	for range benchRounds(b) {
		s := timeIt(func(layers []enforce.LayerResult, _ int) {
			store.AllowInto(ctx, enforce.Request{Subject: "key:hot", Route: "GET /x", Limits: limits}, layers)
		})
		r := timeIt(func([]enforce.LayerResult, int) { hot.Allow() })
		hotStore, hotRate, hotRatio = append(hotStore, s), append(hotRate, r), append(hotRatio, s/r)
		s = timeIt(func(layers []enforce.LayerResult, i int) {
			store.AllowInto(ctx, enforce.Request{Subject: subjects[i%benchKeys], Route: "GET /x", Limits: limits}, layers)
		})
		r = timeIt(func(_ []enforce.LayerResult, i int) { limiters[subjects[i%benchKeys]].Allow() })
		manyStore, manyRate, manyRatio = append(manyStore, s), append(manyRate, r), append(manyRatio, s/r)
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(hotStore), "hot-store-ns")
	b.ReportMetric(median(hotRate), "hot-xrate-ns")
	b.ReportMetric(median(hotRatio), "hot-store/xrate")
	b.ReportMetric(median(manyStore), "100k-store-ns")
	b.ReportMetric(median(manyRate), "100k-xrate-ns")
	b.ReportMetric(median(manyRatio), "100k-store/xrate")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkMemoryBytesPerSubject reports the heap one subject costs the
// memory store at 1,000,000 subjects, usage counting on as the portal runs
// it: one token-bucket limit (OneLimit, the figure issue 17 sets a bound
// on), and a plan-wide limit beside a route's tier (TwoLimits). It is the
// live heap after inserting them less the live heap before (the subjects'
// strings are built beforehand and not counted). No figure is asserted;
// figures are in the README.
//
//	go test -run '^$' -bench MemoryBytesPerSubject -benchtime 1x ./internal/enforce
func BenchmarkMemoryBytesPerSubject(b *testing.B) {
	const n = 1_000_000
	subjects := make([]string, n)
	for i := range subjects {
		subjects[i] = "key:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name   string
		limits []enforce.Limit
	}{
		{"OneLimit", []enforce.Limit{benchLimit}},
		{"TwoLimits", []enforce.Limit{benchLimit, {Name: "fw", Algorithm: enforce.FixedWindow, Limit: 1e12, Window: time.Minute, Route: "GET /x"}}},
		// The demo's anonymous tiers, as TestMemoryStoreFloodStaysBounded
		// sends them: a fixed window and a sliding log holding one entry.
		{"AnonymousTiers", []enforce.Limit{
			{Name: "anonymous-global", Algorithm: enforce.FixedWindow, Limit: 60, Window: time.Minute},
			{Name: "anonymous-search", Algorithm: enforce.SlidingWindowLog, Limit: 10, Window: time.Minute},
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var perSubject float64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				store := New(Options{MaxSubjects: 2 * n})
				layers := make([]enforce.LayerResult, 0, len(bc.limits))
				for _, s := range subjects {
					store.AllowInto(ctx, enforce.Request{Subject: s, Route: "GET /x", Limits: bc.limits}, layers)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if got := store.Len(); got != n {
					b.Fatalf("store holds %d subjects, want %d", got, n)
				}
				perSubject = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(store)
			}
			b.ReportMetric(perSubject, "B/subject")
			b.ReportMetric(0, "ns/op")
		})
	}
}
