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
