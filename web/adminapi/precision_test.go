package adminapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
)

// TestTierPrecisionRoundTrips: a tier's precision goes in and comes back
// through every way of writing a tier (POST and PUT of a plan, POST and PUT
// of one tier), a tier without one is exact, and a precision the engine
// refuses is a field error that names the rule, with nothing written.
func TestTierPrecisionRoundTrips(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")

	body := withLimit(0, "precision", "leased")
	body["limits"].([]any)[0].(map[string]any)["limit"] = 2000
	res := e.do("POST", Prefix+"/plans", token, body)
	if res.status != http.StatusCreated {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	var p planView
	res.decode(t, &p)
	if p.Limits[0].Precision != enforce.PrecisionLeased || p.Limits[1].Precision != enforce.PrecisionExact {
		t.Fatalf("created precisions %q, %q; want leased, exact", p.Limits[0].Precision, p.Limits[1].Precision)
	}
	if !strings.Contains(string(res.body), `"precision":"exact"`) {
		t.Errorf("a tier sent without precision is not shown as exact: %s", res.body)
	}
	planPath := Prefix + "/plans/" + itoa(p.ID)

	var got planView
	e.do("GET", planPath, token, nil).decode(t, &got)
	if got.Limits[0].Precision != enforce.PrecisionLeased {
		t.Errorf("GET: precision %q, want leased", got.Limits[0].Precision)
	}

	t.Run("PutPlan", func(t *testing.T) {
		body := withLimit(1, "precision", "local")
		body["limits"].([]any)[0].(map[string]any)["limit"] = 2000
		body["version"] = got.Version
		res := e.do("PUT", planPath, token, body)
		if res.status != http.StatusOK {
			t.Fatalf("PUT: %d %s", res.status, res.body)
		}
		res.decode(t, &got)
		// limits[0] was sent without precision this time: exact again.
		if got.Limits[0].Precision != enforce.PrecisionExact || got.Limits[1].Precision != enforce.PrecisionLocal {
			t.Errorf("after PUT: %q, %q; want exact, local", got.Limits[0].Precision, got.Limits[1].Precision)
		}
	})

	t.Run("PostAndPutTier", func(t *testing.T) {
		body := limitWith(func(l map[string]any) { l["precision"] = "leased" })
		body["version"] = got.Version
		res := e.do("POST", planPath+"/limits", token, body)
		if res.status != http.StatusCreated {
			t.Fatalf("add tier: %d %s", res.status, res.body)
		}
		res.decode(t, &got)
		added := got.Limits[len(got.Limits)-1]
		if added.Precision != enforce.PrecisionLeased {
			t.Fatalf("added tier: precision %q, want leased", added.Precision)
		}
		body = limitWith(func(l map[string]any) { l["precision"] = "local" })
		body["version"] = got.Version
		res = e.do("PUT", planPath+"/limits/"+itoa(added.ID), token, body)
		if res.status != http.StatusOK {
			t.Fatalf("update tier: %d %s", res.status, res.body)
		}
		res.decode(t, &got)
		if l := got.Limits[len(got.Limits)-1]; l.Precision != enforce.PrecisionLocal {
			t.Errorf("updated tier: precision %q, want local", l.Precision)
		}
	})

	t.Run("ErrRefusedNamingTheRule", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			tier map[string]any
			rule string
		}{
			{"LeasedConcurrency", map[string]any{"name": "inflight", "algorithm": "concurrency", "limit": 5, "precision": "leased"}, "a concurrency limit is always exact"},
			{"LeasedQueue", map[string]any{"name": "shape", "algorithm": "leaky_bucket", "mode": "queue", "limit": 10, "window_seconds": 1, "burst": 5, "precision": "leased"}, "a leaky bucket that queues is always exact"},
			{"LocalQuota", map[string]any{"name": "month", "algorithm": "quota", "period": "month", "limit": 1000, "precision": "local"}, "a quota is always exact"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.tier["version"] = got.Version
				res := e.do("POST", planPath+"/limits", token, tc.tier)
				if res.status != http.StatusBadRequest {
					t.Fatalf("status %d, want 400: %s", res.status, res.body)
				}
				pr := res.problem(t)
				if pr.Type != typeValidation || len(pr.Errors) != 1 || pr.Errors[0].Field != "precision" ||
					!strings.Contains(pr.Errors[0].Message, tc.rule) {
					t.Errorf("problem %+v, want precision: %s", pr, tc.rule)
				}
			})
		}
		var now planView
		e.do("GET", planPath, token, nil).decode(t, &now)
		if now.Version != got.Version || len(now.Limits) != len(got.Limits) {
			t.Errorf("a refused tier changed the plan: v%d with %d tiers, want v%d with %d", now.Version, len(now.Limits), got.Version, len(got.Limits))
		}
	})
}
