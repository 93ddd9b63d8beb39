package adminapi

import (
	"net/http"
	"testing"

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
