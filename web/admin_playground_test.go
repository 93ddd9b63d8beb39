package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/web"
)

// busyReplayer is a playground whose every slot is taken.
type busyReplayer struct{}

func (busyReplayer) Replay(context.Context, playground.Scenario) (playground.Report, error) {
	return playground.Report{}, playground.ErrBusy
}

// TestPlaygroundPageBusy: when the replays running at once are at their
// bound, the page answers 503 with Retry-After and replays nothing.
func TestPlaygroundPageBusy(t *testing.T) {
	e := newEnvWith(t, func(d *web.Deps) { d.Playground = busyReplayer{} })
	c := e.signedIn(operatorEmail)
	res := c.get("/admin/playground?preset=steady", nil)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" ||
		!strings.Contains(res.body, "Too many playground replays") || count(res.doc(t), "playground-run") != 0 {
		t.Fatalf("busy: %d %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// Without a replay asked for, the form itself never waits for a slot.
	if res := c.get("/admin/playground", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("the form alone: %d", res.StatusCode)
	}
}
