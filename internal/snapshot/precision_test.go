package snapshot_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// TestPrecisionReachesTheEngine: a tier's precision, stored in Postgres,
// is in the engine's limit of every key on the plan, of a key's override,
// and of the policy document guard receives; an exact tier arrives with the
// zero precision.
func TestPrecisionReachesTheEngine(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	lease, err := f.plans.Create(ctx, actor, plans.PlanInput{Slug: "lease", Name: "Lease", Limits: []plans.LimitInput{
		{Name: "global", Algorithm: "sliding_window_counter", Limit: 10000, WindowSeconds: 3600, Precision: "leased"},
		{Name: "search", Route: "GET /api/search", Algorithm: "token_bucket", Limit: 600, WindowSeconds: 60, Precision: "local"},
		{Name: "items", Route: "GET /api/items/{id}", Algorithm: "fixed_window", Limit: 60, WindowSeconds: 60},
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, plain := f.key(t, apikeys.NewKey{PlanID: &lease.ID})
	_, over := f.key(t, apikeys.NewKey{PlanID: &lease.ID, Overrides: []plans.LimitInput{
		{Name: "items", Route: "GET /api/items/{id}", Algorithm: "fixed_window", Limit: 6000, WindowSeconds: 60, Precision: "leased"},
	}})
	h := f.holder(t, snapshot.Options{})

	want := map[string]enforce.Precision{"lease-global": enforce.PrecisionLeased, "lease-search": enforce.PrecisionLocal, "lease-items": ""}
	c, err := h.ResolveKey(plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range c.Limits {
		if l.Precision != want[l.Name] {
			t.Errorf("%s: precision %q, want %q", l.Name, l.Precision, want[l.Name])
		}
	}
	c, err = h.ResolveKey(over)
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Limits[2]; l.Name != "lease-items" || l.Limit != 6000 || l.Precision != enforce.PrecisionLeased {
		t.Errorf("override: %+v, want lease-items 6000 leased", l)
	}

	doc := h.Current().Policy(1)
	got := map[string]string{}
	for _, l := range doc.Plans["lease"] {
		got[l.Name] = l.Precision
	}
	if got["lease-global"] != "leased" || got["lease-search"] != "local" || got["lease-items"] != "" {
		t.Errorf("policy document precisions %v, want leased, local and none", got)
	}
}
