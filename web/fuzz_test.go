package web_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/pgtext"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/web"
)

// browserResolve resolves a Location the way a lenient browser does (WHATWG
// URL parsing): tabs and newlines dropped, backslashes read as slashes.
func browserResolve(t *testing.T, base *url.URL, loc string) *url.URL {
	t.Helper()
	loc = strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(loc)
	ref, err := url.Parse(loc)
	if err != nil {
		t.Fatalf("localPath returned %q, which does not parse: %v", loc, err)
	}
	return base.ResolveReference(ref)
}

// FuzzLocalPath checks that no next= value sends a browser off the site,
// whatever normalisation the browser applies to the Location header.
func FuzzLocalPath(f *testing.F) {
	for _, tt := range redirectTargets {
		f.Add(tt.next)
	}
	base, _ := url.Parse("https://sluice.example/signin")
	f.Fuzz(func(t *testing.T, next string) {
		got := web.LocalPath(next)
		if !strings.HasPrefix(got, "/") || strings.HasPrefix(got, "//") {
			t.Fatalf("localPath(%q) = %q: not a path on this site", next, got)
		}
		for _, c := range got {
			if c < 0x20 || c == 0x7f || c == '\\' {
				t.Fatalf("localPath(%q) = %q: contains %q", next, got, c)
			}
		}
		if u := browserResolve(t, base, got); u.Host != base.Host || u.Scheme != base.Scheme {
			t.Fatalf("localPath(%q) = %q leads a browser to %s", next, got, u)
		}
		// Decoded, the path must not turn into a network-path reference for
		// a proxy or framework that decodes before redirecting again.
		if dec, err := url.PathUnescape(got); err == nil && (strings.HasPrefix(dec, "//") || strings.HasPrefix(dec, "/\\")) {
			t.Fatalf("localPath(%q) = %q decodes to %q", next, got, dec)
		}
	})
}

// formRequest is a POST of body as a form.
func formRequest(body string) (*httptest.ResponseRecorder, *http.Request) {
	r := httptest.NewRequest(http.MethodPost, "/admin/plans", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return httptest.NewRecorder(), r
}

// FuzzTierForm feeds arbitrary form bodies to the tier form's decoder and
// the validation behind it: whatever both accept must be storable.
func FuzzTierForm(f *testing.F) {
	for _, s := range []string{
		"name=search&route=GET+%2Fapi%2Fsearch&algorithm=token_bucket&mode=reject&limit=10&window_seconds=60&burst=20&cost=1",
		"name=a%00&algorithm=fixed_window&limit=10&window_seconds=60",
		"name=a&algorithm=fixed_window&limit=9223372036854775807&window_seconds=60",
		"name=a&algorithm=fixed_window&limit=99999999999999999999&window_seconds=60",
		"name=%FF&limit=x",
		"%zz=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		w, r := formRequest(body)
		if err := web.ParseForm(w, r); err != nil {
			return
		}
		in, errs, _ := web.TierInput(r)
		if len(errs) > 0 || len(plans.ValidateLimit("", in, []string{"GET /api/search"})) > 0 {
			return
		}
		for _, s := range []string{in.Name, in.Route, in.Algorithm, in.Mode} {
			if msg := pgtext.Problem(s); msg != "" {
				t.Fatalf("%q: accepted %q that %s", body, s, msg)
			}
		}
		if in.Limit < 1 || in.Limit > plans.MaxLimit || in.Burst < 0 || in.Burst > plans.MaxLimit ||
			in.Cost < 0 || in.Cost > plans.MaxCost || in.WindowSeconds < 1 || in.WindowSeconds > plans.MaxWindowSeconds {
			t.Fatalf("%q: accepted %+v", body, in)
		}
	})
}

// FuzzPlanForm does the same for the plan-fields form.
func FuzzPlanForm(f *testing.F) {
	for _, s := range []string{
		"slug=gold&name=Gold&description=For+teams&is_public=on",
		"slug=gold&name=Go%00ld",
		"slug=gold&name=Gold&description=%C3",
		"slug=GOLD&name=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		w, r := formRequest(body)
		if err := web.ParseForm(w, r); err != nil {
			return
		}
		in := web.PlanInput(r)
		if plans.Validate(in, nil) != nil {
			return
		}
		for _, s := range []string{in.Slug, in.Name, in.Description} {
			if msg := pgtext.Problem(s); msg != "" {
				t.Fatalf("%q: accepted %q that %s", body, s, msg)
			}
		}
	})
}
