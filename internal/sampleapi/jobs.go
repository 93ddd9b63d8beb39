package sampleapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// errJobsFull means every slot of the job table holds an unfinished job.
var errJobsFull = errors.New("too many unfinished jobs")

// job is one report request. Its progress is a function of time (queued
// until startAt, running until doneAt, then done), so no goroutine runs per
// job and a job's state is the same whenever it is read.
type job struct {
	id      string
	owner   string
	query   string
	created time.Time
	startAt time.Time
	doneAt  time.Time
}

func (j *job) status(now time.Time) string {
	switch {
	case now.Before(j.startAt):
		return "queued"
	case now.Before(j.doneAt):
		return "running"
	}
	return "done"
}

// jobTable is a bounded in-memory job store: when full, the oldest finished
// job makes room, and when none has finished a new job is refused, so memory
// stays bounded however many reports are requested.
type jobTable struct {
	mu    sync.Mutex
	max   int
	jobs  map[string]*job
	order []string // insertion order, oldest first
}

func newJobTable(max int) *jobTable {
	return &jobTable{max: max, jobs: make(map[string]*job, max)}
}

// add stores j under a fresh random id and returns it.
func (t *jobTable) add(j *job, now time.Time) (*job, error) {
	var raw [12]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	j.id = hex.EncodeToString(raw[:])
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.jobs) >= t.max && !t.evictOne(now) {
		return nil, errJobsFull
	}
	t.jobs[j.id] = j
	t.order = append(t.order, j.id)
	return j, nil
}

// evictOne drops the oldest finished job; t.mu is held.
func (t *jobTable) evictOne(now time.Time) bool {
	for i, id := range t.order {
		if t.jobs[id].status(now) == "done" {
			delete(t.jobs, id)
			t.order = append(t.order[:i], t.order[i+1:]...)
			return true
		}
	}
	return false
}

func (t *jobTable) get(id string) (*job, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j, ok := t.jobs[id]
	return j, ok
}
