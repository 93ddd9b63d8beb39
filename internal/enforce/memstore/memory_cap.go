package memstore

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// The bound on subjects that Options.MaxSubjects of 0 chooses follows the
// memory the process may use (see MaxSubjectsFor), so that a large host
// holds its active callers instead of evicting them: a bound below the
// active subjects turns decisions into eviction scans (100,000 subjects
// round robin under the old fixed 50,000: 3 to 6 times the time of the same
// store holding them all and 4 to 8 times x/time/rate's, medians of three
// sets of runs, and about 200 B allocated a decision;
// BenchmarkMemoryActiveSubjectsInterleaved, docs/benchmarks.md).
const (
	// MinMaxSubjects is the fewest subjects the derived bound holds,
	// whatever the memory: the fixed default before the bound followed
	// memory, some 17 MB of state.
	MinMaxSubjects = 50_000
	// MaxMaxSubjects is the most subjects the derived bound holds, and
	// the most PORTAL_MEMORY_MAX_SUBJECTS accepts: about 50 GB of state
	// at BytesPerSubject.
	MaxMaxSubjects = 100_000_000
	// MemoryShare is the fraction of the process's memory, 1/MemoryShare,
	// that the derived bound lets subjects' state take. The Go heap may
	// grow to twice its live size before a collection (GOGC=100), so the
	// state may cost a quarter of the memory at the bound.
	MemoryShare = 8
	// BytesPerSubject is what one subject is taken to cost, table
	// included: BenchmarkMemoryBytesPerSubject holds 1,000,000 subjects and
	// reads the live heap (runtime.MemStats.HeapAlloc after a collection)
	// before and after: 162 B with one token bucket, 274 B with a
	// plan-wide limit beside a route's tier, 354 B with the demo's
	// anonymous tiers (a fixed window and a sliding log of one entry;
	// 2026-12-07, Go 1.26, amd64), rounded up to leave room for longer
	// logs and more layers.
	BytesPerSubject = 512
)

// MaxSubjectsFor is the bound on subjects that Options.MaxSubjects of 0
// chooses for a process that may use memory bytes (0: unknown): a
// MemoryShare-th of it at BytesPerSubject, within MinMaxSubjects and
// MaxMaxSubjects. 1 GiB gives 262,144 subjects; 16 GiB 4,194,304.
func MaxSubjectsFor(memory uint64) int {
	n := memory / MemoryShare / BytesPerSubject
	return int(min(max(n, MinMaxSubjects), MaxMaxSubjects))
}

// Memory is the memory a process may use, and where that figure comes
// from.
type Memory struct {
	// Bytes is 0 when no source gave a figure.
	Bytes uint64
	// Source is "GOMEMLIMIT", "cgroup memory.max", "physical memory" or
	// "unknown".
	Source string
}

// ProcessMemory is the memory this process may use: the Go runtime's soft
// memory limit when one is set (GOMEMLIMIT or debug.SetMemoryLimit), else
// the cgroup v2 memory.max of the process's cgroup and its parents when
// one is set, else the machine's physical memory (/proc/meminfo's
// MemTotal). It reads a few small files, so callers that build many stores
// should call it once.
func ProcessMemory() Memory {
	return processMemory("/", debug.SetMemoryLimit(-1))
}

// processMemory is ProcessMemory reading /proc and /sys under root, with
// goLimit the runtime's memory limit (math.MaxInt64: none).
func processMemory(root string, goLimit int64) Memory {
	if goLimit > 0 && goLimit != math.MaxInt64 {
		return Memory{Bytes: uint64(goLimit), Source: "GOMEMLIMIT"}
	}
	if n := cgroupMemoryMax(root); n > 0 {
		return Memory{Bytes: n, Source: "cgroup memory.max"}
	}
	if n := memTotal(root); n > 0 {
		return Memory{Bytes: n, Source: "physical memory"}
	}
	return Memory{Source: "unknown"}
}

// cgroupMemoryMax is the smallest memory.max set on the process's cgroup v2
// group or any group above it, 0 when none is set or the process is not in
// a cgroup v2 hierarchy mounted at /sys/fs/cgroup.
func cgroupMemoryMax(root string) uint64 {
	b, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0
	}
	var group string
	found := false
	for line := range strings.SplitSeq(string(b), "\n") {
		// cgroup v2's line is "0::<path>"; v1 controllers have names.
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			group, found = path.Clean("/"+p), true
			break
		}
	}
	if !found {
		return 0
	}
	var least uint64
	for g := group; ; g = path.Dir(g) {
		b, err := os.ReadFile(filepath.Join(root, "sys/fs/cgroup", g, "memory.max"))
		if err == nil {
			// "max" is no limit.
			if n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64); err == nil && n > 0 && (least == 0 || n < least) {
				least = n
			}
		}
		if g == "/" {
			return least
		}
	}
}

// memTotal is /proc/meminfo's MemTotal in bytes, 0 when it cannot be read.
func memTotal(root string) uint64 {
	f, err := os.Open(filepath.Join(root, "proc/meminfo"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// MemTotal:       24683772 kB
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0
		}
		return n * 1024
	}
	return 0
}
