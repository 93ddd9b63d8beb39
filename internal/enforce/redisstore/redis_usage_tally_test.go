package redisstore

import (
	"maps"
	"testing"
)

// TestUsageTallyCountsRunsAndSwitches adds decisions in runs of one key and
// interleaved keys: take holds every decision under its own key, the run
// in progress included, and starts afresh.
func TestUsageTallyCountsRunsAndSwitches(t *testing.T) {
	var u usageTally
	add := func(subject, route string, bucket int64, allowed, keyed bool, n int) {
		for range n {
			u.add(subject, route, bucket, allowed, keyed)
		}
	}
	add("key:1", "GET /a", 10, true, true, 3)
	add("key:1", "GET /a", 10, false, true, 2)
	add("ip:a", "GET /a", 10, true, false, 1)
	add("key:1", "GET /a", 10, true, true, 4) // back to the first key
	add("key:1", "GET /b", 10, true, true, 1) // another route
	add("key:1", "GET /b", 20, true, true, 2) // another bucket
	add("ip:a", "GET /a", 10, false, false, 1)

	want := map[usageTallyKey]usageCounts{
		{"key:1", "GET /a", 10}: {admitted: 7, rejected: 2, keyed: true},
		{"ip:a", "GET /a", 10}:  {admitted: 1, rejected: 1},
		{"key:1", "GET /b", 10}: {admitted: 1, keyed: true},
		{"key:1", "GET /b", 20}: {admitted: 2, keyed: true},
	}
	if got := u.take(); !maps.Equal(got, want) {
		t.Fatalf("take = %v, want %v", got, want)
	}
	if got := u.take(); len(got) != 0 {
		t.Fatalf("second take = %v, want nothing", got)
	}

	t.Run("RestoredCountsAddToNewOnes", func(t *testing.T) {
		add("key:1", "GET /a", 30, true, true, 2)
		u.restore(map[usageTallyKey]usageCounts{{"key:1", "GET /a", 30}: {admitted: 5, rejected: 1, keyed: true}})
		add("key:1", "GET /a", 30, true, true, 1)
		want := map[usageTallyKey]usageCounts{{"key:1", "GET /a", 30}: {admitted: 8, rejected: 1, keyed: true}}
		if got := u.take(); !maps.Equal(got, want) {
			t.Fatalf("take = %v, want %v", got, want)
		}
	})
}
