package adminapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/pgtext"
	"github.com/sluicehq/sluice/internal/plans"
)

// decodeBody runs decodeJSON on body as the handlers do.
func decodeBody(body string, dst any) error {
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return decodeJSON(httptest.NewRecorder(), req, dst)
}

// checkAccepted asserts what anything the decoder and validation let
// through must satisfy before it may reach Postgres.
func checkAccepted(t *testing.T, body string, limits []plans.LimitInput, texts ...string) {
	t.Helper()
	for _, l := range limits {
		texts = append(texts, l.Name, l.Route, l.Algorithm, l.Mode)
		switch {
		case l.Limit < 1 || l.Limit > plans.MaxLimit:
			t.Fatalf("%q: accepted limit %d", body, l.Limit)
		case l.WindowSeconds < plans.MinWindowSeconds || l.WindowSeconds > plans.MaxWindowSeconds:
			t.Fatalf("%q: accepted window %d", body, l.WindowSeconds)
		case l.Burst < 0 || l.Burst > plans.MaxLimit:
			t.Fatalf("%q: accepted burst %d", body, l.Burst)
		case l.Cost < 0 || l.Cost > plans.MaxCost:
			t.Fatalf("%q: accepted cost %d", body, l.Cost)
		}
	}
	for _, s := range texts {
		if msg := pgtext.Problem(s); msg != "" {
			t.Fatalf("%q: accepted text %q that %s", body, s, msg)
		}
	}
}

var fuzzRoutes = []string{"GET /api/search", "GET /api/items/{id}"}

// FuzzDecodePlan feeds arbitrary bodies to the plan decoder and the
// validation behind it: no panic, every refusal a requestError or a
// validation error, and nothing accepted that Postgres could not store.
func FuzzDecodePlan(f *testing.F) {
	for _, s := range []string{
		`{"slug":"gold","name":"Gold","limits":[{"name":"a","algorithm":"fixed_window","limit":10,"window_seconds":60}]}`,
		`{"slug":"gold","name":"Go\u0000ld"}`,
		"{\"slug\":\"gold\",\"name\":\"G\xffld\"}",
		`{"slug":"gold","name":"Gold","limits":[{"name":"a","algorithm":"token_bucket","limit":9223372036854775807,"window_seconds":1}]}`,
		`{"slug":"gold","name":"Gold"} {}`,
		`[]`, `{"slug":1}`, `{"unknown":true}`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var b planBody
		if err := decodeBody(body, &b); err != nil {
			if _, ok := err.(*requestError); !ok {
				t.Fatalf("%q: refused with %T %v, want a requestError", body, err, err)
			}
			return
		}
		in := b.input()
		if plans.Validate(in, fuzzRoutes) != nil {
			return
		}
		checkAccepted(t, body, in.Limits, in.Slug, in.Name, in.Description)
	})
}

// FuzzDecodeLimit does the same for one tier, as POST /plans/{id}/limits
// takes it.
func FuzzDecodeLimit(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"name":"a","algorithm":"leaky_bucket","mode":"queue","limit":10,"window_seconds":60,"burst":5}`,
		`{"version":1,"name":"a\u0000","algorithm":"fixed_window","limit":10,"window_seconds":60}`,
		`{"version":1,"name":"a","algorithm":"fixed_window","limit":1e3,"window_seconds":60}`,
		`{"version":1,"name":"a","algorithm":"token_bucket","limit":1000000000000,"window_seconds":2678400,"burst":1000000000000,"cost":1000000}`,
		`{"version":"1"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var b limitWriteBody
		if err := decodeBody(body, &b); err != nil {
			if _, ok := err.(*requestError); !ok {
				t.Fatalf("%q: refused with %T %v, want a requestError", body, err, err)
			}
			return
		}
		in := b.limitBody.input()
		if len(plans.ValidateLimit("", in, fuzzRoutes)) != 0 {
			return
		}
		checkAccepted(t, body, []plans.LimitInput{in})
	})
}
