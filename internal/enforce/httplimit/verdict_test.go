package httplimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
)

// TestCheckAnswersAsTheMiddlewareDoes puts the same requests to Check and
// to Enforce on twin stores and compares status, rate-limit fields and
// bodies: a way in without an http.Request gets the HTTP way in's answers.
func TestCheckAnswersAsTheMiddlewareDoes(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return at }
	limits := []enforce.Limit{{Name: "fw", Algorithm: enforce.FixedWindow, Limit: 3, Window: time.Minute}}
	newMW := func() *httplimit.Middleware {
		res := &mwResolver{AnonLimits: limits, Keys: map[string]enforce.Caller{
			"sk_good": {Subject: "dev:1", Key: "key:1", Plan: "pro", Limits: limits},
		}}
		return httplimit.NewMiddleware(memstore.New(memstore.Options{Now: now}), res, httplimit.Options{Now: now})
	}
	viaCheck, viaHTTP := newMW(), newMW()
	cases := []struct {
		name       string
		cred       httplimit.Credentials
		hits       int64
		wantStatus int
	}{
		{"AnonymousAdmitted", httplimit.Credentials{Addr: netip.MustParseAddr("192.0.2.1")}, 2, http.StatusOK},
		{"AnonymousRejected", httplimit.Credentials{Addr: netip.MustParseAddr("192.0.2.1")}, 2, http.StatusTooManyRequests},
		{"KeyAdmitted", httplimit.Credentials{Authorization: "Bearer sk_good"}, 1, http.StatusOK},
		{"UnknownKey", httplimit.Credentials{APIKey: "sk_bad"}, 1, http.StatusUnauthorized},
		{"OtherScheme", httplimit.Credentials{Authorization: "Basic Zm9v"}, 1, http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := viaCheck.Check(context.Background(), tc.cred, "", tc.hits)
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = netip.AddrPortFrom(tc.cred.Addr, 1234).String()
			if tc.cred.APIKey != "" {
				r.Header.Set("X-API-Key", tc.cred.APIKey)
			}
			if tc.cred.Authorization != "" {
				r.Header.Set("Authorization", tc.cred.Authorization)
			}
			w := httptest.NewRecorder()
			viaHTTP.EnforceHits(w, r, "", tc.hits, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			if v.Status != tc.wantStatus || w.Code != tc.wantStatus {
				t.Fatalf("Check status %d, Enforce %d, want %d", v.Status, w.Code, tc.wantStatus)
			}
			for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After", "WWW-Authenticate"} {
				if got, want := v.Header.Get(name), w.Header().Get(name); got != want {
					t.Errorf("%s: Check %q, Enforce %q", name, got, want)
				}
			}
			if string(v.Body) != w.Body.String() {
				t.Errorf("body: Check %q, Enforce %q", v.Body, w.Body.String())
			}
			if tc.wantStatus == http.StatusTooManyRequests {
				var body httplimit.RejectionBody
				if err := json.Unmarshal(v.Body, &body); err != nil || body.Policy != "fw" || body.Limit != 3 {
					t.Errorf("rejection body %s (%v): want policy fw, limit 3", v.Body, err)
				}
				if fired, ok := v.Outcome.Fired(); !ok || fired.Limit.Name != "fw" || fired.Allowed {
					t.Errorf("outcome fired %+v, %v: want the rejecting fw layer", fired, ok)
				}
			}
		})
	}
}
