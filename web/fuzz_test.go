package web_test

import (
	"net/url"
	"strings"
	"testing"

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
