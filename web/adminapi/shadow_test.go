package adminapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/enforce"
)

func TestPromoteShadowTierInOneCall(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	res := e.do("POST", Prefix+"/plans", token, validPlan())
	if res.status != http.StatusCreated {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	var p planView
	res.decode(t, &p)
	planPath := Prefix + "/plans/" + itoa(p.ID)
	body := limitWith(func(l map[string]any) { l["mode"] = "shadow" })
	body["version"] = p.Version
	res = e.do("POST", planPath+"/limits", token, body)
	if res.status != http.StatusCreated {
		t.Fatalf("add shadow tier: %d %s", res.status, res.body)
	}
	res.decode(t, &p)
	shadow := p.Limits[len(p.Limits)-1]
	if shadow.Mode != enforce.ModeShadow {
		t.Fatalf("added tier mode %q, want shadow", shadow.Mode)
	}
	promote := planPath + "/limits/" + itoa(shadow.ID) + "/promote?version="

	res = e.do("POST", promote+itoa(int64(p.Version-1)), token, nil)
	if res.status != http.StatusConflict {
		t.Errorf("stale promotion: %d %s, want 409", res.status, res.body)
	}
	res = e.do("POST", promote+itoa(int64(p.Version)), token, nil)
	if res.status != http.StatusOK {
		t.Fatalf("promote: %d %s", res.status, res.body)
	}
	var after planView
	res.decode(t, &after)
	if got := after.Limits[len(after.Limits)-1]; got.Mode != enforce.ModeReject || got.Limit != shadow.Limit || after.Version != p.Version+1 {
		t.Errorf("after promotion: %+v v%d, want mode reject, limit %d, v%d", got, after.Version, shadow.Limit, p.Version+1)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'limit.promote' AND object_id = $1`, itoa(shadow.ID)); n != 1 {
		t.Errorf("limit.promote audit entries = %d, want 1", n)
	}

	// Promoting an enforced tier is refused, naming the field.
	res = e.do("POST", promote+itoa(int64(after.Version)), token, nil)
	if res.status != http.StatusBadRequest && res.status != http.StatusUnprocessableEntity {
		t.Fatalf("promote enforced: %d %s, want a 4xx naming mode", res.status, res.body)
	}
	if pr := res.problem(t); len(pr.Errors) != 1 || pr.Errors[0].Field != "mode" {
		t.Errorf("problem = %+v, want one error on mode", pr)
	}
}

func TestSetBillingAnchor(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	dev := e.user("dev@example.com", "developer", nil).ID
	path := Prefix + "/developers/" + itoa(dev) + "/billing-anchor"

	res := e.do("PUT", path, token, map[string]any{"billing_anchor": "2026-01-31T10:00:00Z"})
	if res.status != http.StatusOK {
		t.Fatalf("set: %d %s", res.status, res.body)
	}
	var got struct {
		BillingAnchor *string `json:"billing_anchor"`
		Effective     string  `json:"effective_billing_anchor"`
	}
	res.decode(t, &got)
	if got.BillingAnchor == nil || *got.BillingAnchor != "2026-01-31T10:00:00Z" || got.Effective != "2026-01-31T10:00:00Z" {
		t.Errorf("set = %+v", got)
	}
	if n := e.count(`SELECT count(*) FROM audit_log WHERE action = 'user.set_billing_anchor' AND object_id = $1`, itoa(dev)); n != 1 {
		t.Errorf("audit entries = %d, want 1", n)
	}
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"Missing", map[string]any{}},
		{"NotAnInstant", map[string]any{"billing_anchor": "31 January"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.do("PUT", path, token, tc.body)
			if res.status != http.StatusBadRequest && res.status != http.StatusUnprocessableEntity {
				t.Fatalf("status %d %s, want 4xx", res.status, res.body)
			}
			if p := res.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != "billing_anchor" {
				t.Errorf("problem = %+v, want one error on billing_anchor", p)
			}
		})
	}
	if res := e.do("PUT", Prefix+"/developers/999999/billing-anchor", token, map[string]any{"billing_anchor": nil}); res.status != http.StatusNotFound {
		t.Errorf("unknown developer: %d, want 404", res.status)
	}
	res = e.do("PUT", path, token, map[string]any{"billing_anchor": nil})
	res.decode(t, &got)
	if res.status != http.StatusOK || got.BillingAnchor != nil {
		t.Errorf("clear: %d %+v", res.status, got)
	}
}

func TestQuotaGrantsAndResets(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	plan := with(func(p map[string]any) {
		p["limits"] = []map[string]any{{"name": "monthly", "algorithm": "quota", "period": "month", "limit": 3, "window_seconds": 86400}}
	})
	res := e.do("POST", Prefix+"/plans", token, plan)
	if res.status != http.StatusCreated {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	var p planView
	res.decode(t, &p)
	dev := e.user("dev@example.com", "developer", &p.ID).ID
	ctx := context.Background()
	// An anchor ten days back keeps the requests away from a renewal: with
	// the sign-up instant itself as the anchor, a store clock reading a
	// millisecond behind Postgres's put the first requests in the period
	// before it (seen once in CI: 13 remaining after the grant).
	tenDaysAgo := time.Now().Add(-10 * 24 * time.Hour)
	anchor, err := billing.SetAnchor(ctx, e.pool, "test", dev, &tenDaysAgo)
	if err != nil {
		t.Fatal(err)
	}
	req := enforce.Request{Subject: enforce.DeveloperSubject(dev), Limits: []enforce.Limit{p.Limits[0].Enforce(p.Slug)}, Anchor: anchor.Effective}
	for range 3 {
		if d, err := e.store.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("Allow: %+v %v", d, err)
		}
	}
	base := Prefix + "/developers/" + itoa(dev)
	var q quotaResult
	res = e.do("POST", base+"/quota-grants", token, map[string]any{"limit": "monthly", "units": 10})
	if res.status != http.StatusOK {
		t.Fatalf("grant: %d %s", res.status, res.body)
	}
	res.decode(t, &q)
	if q.Remaining != 10 || q.Plan != p.Slug || q.Limit != "monthly" || q.ResetAfterSeconds < 1 {
		t.Errorf("after the grant: %+v, want 10 remaining", q)
	}
	if d, err := e.store.Allow(ctx, req); err != nil || !d.Allowed || d.Layers[0].Remaining != 9 {
		t.Errorf("Allow after the grant: %+v %v, want admitted with 9 left", d, err)
	}
	res = e.do("POST", base+"/quota-resets", token, map[string]any{"limit": "monthly"})
	res.decode(t, &q)
	if res.status != http.StatusOK || q.Remaining != 3 {
		t.Errorf("reset: %d %+v, want 3 remaining", res.status, q)
	}
	for _, action := range []string{"quota.grant", "quota.reset"} {
		if n := e.count(`SELECT count(*) FROM audit_log WHERE action = $1 AND object_id = $2`, action, itoa(dev)); n != 1 {
			t.Errorf("%s audit entries = %d, want 1", action, n)
		}
	}
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		field      string
	}{
		{"GrantWithoutUnits", "/quota-grants", map[string]any{"limit": "monthly"}, "units"},
		{"NotAQuotaTier", "/quota-resets", map[string]any{"limit": "global"}, "limit"},
		{"NoLimit", "/quota-resets", map[string]any{}, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.do("POST", base+tc.path, token, tc.body)
			if res.status != http.StatusBadRequest && res.status != http.StatusUnprocessableEntity {
				t.Fatalf("status %d %s, want 4xx", res.status, res.body)
			}
			if pr := res.problem(t); len(pr.Errors) != 1 || pr.Errors[0].Field != tc.field {
				t.Errorf("problem = %+v, want one error on %s", pr, tc.field)
			}
		})
	}
}
