package playground

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestRunnerRefusesWhenFull: with every slot held, a replay is refused at
// once with ErrBusy and runs nothing; a freed slot lets the next one run.
func TestRunnerRefusesWhenFull(t *testing.T) {
	r := NewRunner(2)
	sc := Scenario{Arrivals: []Arrival{{At: time.Unix(0, 0), Subject: "s"}},
		Tiers: []plans.LimitInput{{Name: "t", Algorithm: "fixed_window", Limit: 1, WindowSeconds: 1, Cost: 1, Mode: "reject"}}}
	r.slots <- struct{}{}
	r.slots <- struct{}{}
	for range 3 {
		if rep, err := r.Replay(context.Background(), sc); !errors.Is(err, ErrBusy) || len(rep.Runs) != 0 {
			t.Fatalf("full: %d runs, %v; want none and ErrBusy", len(rep.Runs), err)
		}
	}
	<-r.slots
	rep, err := r.Replay(context.Background(), sc)
	if err != nil || len(rep.Runs) != 5 {
		t.Fatalf("one slot free: %d runs, %v", len(rep.Runs), err)
	}
	if len(r.slots) != 1 {
		t.Fatalf("%d slots held after the replay, want the 1 still held", len(r.slots))
	}
	if n := cap(NewRunner(0).slots); n != DefaultParallel {
		t.Errorf("NewRunner(0) has %d slots, want %d", n, DefaultParallel)
	}
}
