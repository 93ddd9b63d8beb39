package memstore

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestMaxSubjectsFor(t *testing.T) {
	const gib = 1 << 30
	for _, tt := range []struct {
		name   string
		memory uint64
		want   int
	}{
		{"UnknownGetsTheFloor", 0, MinMaxSubjects},
		{"SmallContainerGetsTheFloor", 128 << 20, MinMaxSubjects}, // 32,768 by memory
		{"JustAboveTheFloor", 8 * BytesPerSubject * (MinMaxSubjects + 1), MinMaxSubjects + 1},
		{"OneGiB", gib, 262_144}, // 128 MiB / 512 B
		{"SixteenGiB", 16 * gib, 4_194_304},
		{"RoundsDown", 8*BytesPerSubject*200_000 + 8*BytesPerSubject - 1, 200_000},
		{"HugeHostGetsTheCeiling", 1 << 50, MaxMaxSubjects},
		{"NoLimitAtAllGetsTheCeiling", math.MaxUint64, MaxMaxSubjects},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := MaxSubjectsFor(tt.memory); got != tt.want {
				t.Fatalf("MaxSubjectsFor(%d) = %d, want %d", tt.memory, got, tt.want)
			}
		})
	}
	// 100,000 active subjects fit the derived bound from 400 MiB up, so
	// any host that can serve them holds them without evicting.
	if got := MaxSubjectsFor(400 << 20); got < 100_000 {
		t.Fatalf("MaxSubjectsFor(400 MiB) = %d, want at least 100,000", got)
	}
}

// writeFiles lays out files (path under root -> content) in a new root.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestProcessMemory(t *testing.T) {
	const meminfo = "MemTotal:       24683772 kB\nMemFree:        15836696 kB\n"
	const v2 = "0::/system.slice/portal.service\n"
	const hybrid = "4:memory:/process_api/68a0\n1:cpu:/\n0::/\n"
	for _, tt := range []struct {
		name    string
		files   map[string]string
		goLimit int64
		want    Memory
	}{
		{"GOMEMLIMITFirst", map[string]string{
			"proc/self/cgroup": v2, "sys/fs/cgroup/system.slice/portal.service/memory.max": "1073741824\n", "proc/meminfo": meminfo,
		}, 512 << 20, Memory{512 << 20, "GOMEMLIMIT"}},
		{"CgroupWhenNoGOMEMLIMIT", map[string]string{
			"proc/self/cgroup": v2, "sys/fs/cgroup/system.slice/portal.service/memory.max": "1073741824\n", "proc/meminfo": meminfo,
		}, math.MaxInt64, Memory{1 << 30, "cgroup memory.max"}},
		{"ParentCgroupBinds", map[string]string{
			"proc/self/cgroup": v2,
			"sys/fs/cgroup/system.slice/portal.service/memory.max": "max\n",
			"sys/fs/cgroup/system.slice/memory.max":                "2147483648\n",
			"proc/meminfo":                                         meminfo,
		}, math.MaxInt64, Memory{2 << 30, "cgroup memory.max"}},
		{"TighterOfTwoCgroups", map[string]string{
			"proc/self/cgroup": v2,
			"sys/fs/cgroup/system.slice/portal.service/memory.max": "1073741824\n",
			"sys/fs/cgroup/system.slice/memory.max":                "2147483648\n",
		}, math.MaxInt64, Memory{1 << 30, "cgroup memory.max"}},
		{"CgroupMaxMeansPhysicalMemory", map[string]string{
			"proc/self/cgroup": v2, "sys/fs/cgroup/system.slice/portal.service/memory.max": "max\n", "proc/meminfo": meminfo,
		}, math.MaxInt64, Memory{24683772 * 1024, "physical memory"}},
		{"CgroupV1IsNotRead", map[string]string{
			"proc/self/cgroup": hybrid, "sys/fs/cgroup/memory/process_api/68a0/memory.limit_in_bytes": "1073741824\n", "proc/meminfo": meminfo,
		}, math.MaxInt64, Memory{24683772 * 1024, "physical memory"}},
		{"NoCgroupFile", map[string]string{"proc/meminfo": meminfo}, math.MaxInt64, Memory{24683772 * 1024, "physical memory"}},
		{"NothingReadable", nil, math.MaxInt64, Memory{0, "unknown"}},
		{"MeminfoWithoutKB", map[string]string{"proc/meminfo": "MemTotal: 24683772\n"}, math.MaxInt64, Memory{0, "unknown"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := processMemory(writeFiles(t, tt.files), tt.goLimit); got != tt.want {
				t.Fatalf("processMemory = %+v, want %+v", got, tt.want)
			}
		})
	}
}
