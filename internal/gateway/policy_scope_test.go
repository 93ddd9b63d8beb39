package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/snapshot"
)

// TestPolicyFeedScopedToTheTokensService gives two services a token each
// and checks that each token reads only what its service enforces (issue
// 30, item 11): no route or tier of the other service, no plan no caller
// uses, billing anchors only where a quota applies, and still every key,
// since any developer's key may call either service.
func TestPolicyFeedScopedToTheTokensService(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil)
	const invoices = "GET /invoices/{id}"
	if _, err := f.services.Create(ctx, actor, services.Input{Slug: "billing", Name: "Billing", Routes: []string{invoices}}); err != nil {
		t.Fatal(err)
	}
	enterprise, err := f.plans.Create(ctx, actor, plans.PlanInput{Slug: "enterprise", Name: "Enterprise", Limits: []plans.LimitInput{
		{Name: "invoices", Route: invoices, Algorithm: "fixed_window", Limit: 50, WindowSeconds: 60},
		{Name: "monthly", Algorithm: "quota", Limit: 100000, Period: "month"},
		{Name: "hourly", Algorithm: "fixed_window", Limit: 5000, WindowSeconds: 3600},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.plans.Create(ctx, actor, plans.PlanInput{Slug: "secret-deal", Name: "Secret deal", Limits: []plans.LimitInput{
		{Name: "hourly", Algorithm: "fixed_window", Limit: 9, WindowSeconds: 3600}}}); err != nil {
		t.Fatal(err)
	}
	var dev int64
	if err := f.pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ('big@example.com', 'x', 'developer') RETURNING id`).Scan(&dev); err != nil {
		t.Fatal(err)
	}
	big, bigSecret, err := f.keys.Create(ctx, actor, apikeys.NewKey{UserID: dev, Name: "big", PlanID: &enterprise.ID})
	if err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, func(*snapshot.Snapshot) bool { _, err := f.holder.ResolveKey(bigSecret); return err == nil })
	_, shopToken, err := f.services.CreateToken(ctx, actor, "shop", "shop's guard")
	if err != nil {
		t.Fatal(err)
	}
	_, billingToken, err := f.services.CreateToken(ctx, actor, "billing", "billing's guard")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(gateway.PolicyPath, gateway.NewPolicyFeed(gateway.SnapshotPolicy(f.holder), f.services, f.logger))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	read := func(t *testing.T, token string) (policy.Document, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+gateway.PolicyPath, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var d policy.Document
		if res.StatusCode != http.StatusOK || json.Unmarshal(body, &d) != nil {
			t.Fatalf("status %d body %.200q", res.StatusCode, body)
		}
		return d, string(body)
	}
	keyOf := func(t *testing.T, d policy.Document, id int64) policy.Key {
		t.Helper()
		for _, k := range d.Keys {
			if k.KeyID == id {
				return k
			}
		}
		t.Fatalf("key %d is not in the document: any developer's key may call the service", id)
		return policy.Key{}
	}
	names := func(ls []policy.Limit) string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Name)
		}
		return strings.Join(out, ",")
	}

	t.Run("Shop", func(t *testing.T) {
		d, body := read(t, shopToken)
		for _, other := range []string{"/invoices", "secret-deal"} {
			if strings.Contains(body, other) {
				t.Errorf("the shop's document names %q", other)
			}
		}
		if len(d.Keys) != 2 {
			t.Errorf("%d keys, want both developers' 2", len(d.Keys))
		}
		if got := names(d.Plans["enterprise"]); got != "enterprise-monthly,enterprise-hourly" {
			t.Errorf("enterprise limits = %s, want the plan-wide ones only", got)
		}
		if got := names(d.Plans["shop"]); got != "shop-items,shop-files,shop-slots" {
			t.Errorf("shop limits = %s, want all three of its tiers", got)
		}
		if k := keyOf(t, d, big.ID); k.Anchor == nil {
			t.Error("the enterprise key lost its anchor: its monthly quota applies here")
		}
		if k := keyOf(t, d, f.key.ID); k.Anchor != nil {
			t.Errorf("the shop key's billing anchor %v is given out: no quota applies to it", k.Anchor)
		}
	})

	t.Run("Billing", func(t *testing.T) {
		d, body := read(t, billingToken)
		if strings.Contains(body, itemsRoute) || strings.Contains(body, "/files/") {
			t.Error("the billing document names the shop's routes")
		}
		if got := names(d.Plans["enterprise"]); got != "enterprise-invoices,enterprise-monthly,enterprise-hourly" {
			t.Errorf("enterprise limits = %s, want its invoices tier and the plan-wide ones", got)
		}
		if got := names(d.Plans["shop"]); got != "" {
			t.Errorf("shop limits = %s, want none: both are on the shop's routes", got)
		}
	})
}
