package planfile_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/planfile"
)

// TestConcurrencyTierNeedsNoWindow: the schema takes a concurrency tier
// without window_seconds, defaulted as plans stores it, and still wants
// one of every rate algorithm.
func TestConcurrencyTierNeedsNoWindow(t *testing.T) {
	file := "version: 1\nplans:\n  - slug: gold\n    name: Gold\n    limits:\n      - name: in-flight\n        algorithm: concurrency\n        limit: 4\n        mode: queue\n"
	p, err := planfile.Decode("plans.yaml", []byte(file))
	if err != nil {
		t.Fatalf("a concurrency tier without a window: %v", err)
	}
	in := p.File.Plans[0].Input()
	if l := in.Limits[0]; l.Algorithm != "concurrency" || l.Limit != 4 || l.WindowSeconds != 60 || l.Cost != 1 || l.Mode != "queue" {
		t.Errorf("tier = %+v, want concurrency 4, window defaulted to 60, cost 1, queue", l)
	}
	_, err = planfile.Decode("plans.yaml", []byte(strings.Replace(file, "concurrency", "token_bucket", 1)))
	var fe *planfile.Error
	if !errors.As(err, &fe) || len(fe.Problems) == 0 || fe.Problems[0].Field != "plans[0].limits[0].window_seconds" {
		t.Fatalf("a token bucket without a window: %v, want window_seconds required", err)
	}
}
