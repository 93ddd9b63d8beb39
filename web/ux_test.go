package web_test

import (
	"net/http"
	"testing"
)

// TestSlashAddressesRedirect: the first-start message and the README print
// /admin/ and /app/; typed with the slash, they reach the page.
func TestSlashAddressesRedirect(t *testing.T) {
	e := newEnv(t)
	c := e.anonymous()
	for _, tt := range []struct{ path, want string }{
		{"/admin/", "/admin"},
		{"/app/", "/app"},
		{"/docs/", "/docs"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			res := c.get(tt.path, nil)
			if res.StatusCode != http.StatusMovedPermanently {
				t.Fatalf("status %d, want 301", res.StatusCode)
			}
			if got := res.Header.Get("Location"); got != tt.want {
				t.Errorf("Location = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("deeper unknown paths are still 404", func(t *testing.T) {
		if res := c.get("/admin/nothing-here", nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("status %d, want 404", res.StatusCode)
		}
	})
}

// TestDocsUsageLinkFitsTheViewer: the docs page's link to live usage leads
// somewhere the reader may go (an operator has no /app).
func TestDocsUsageLinkFitsTheViewer(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	for _, tt := range []struct{ email, want string }{
		{operatorEmail, "/admin/live"},
		{developerEmail, "/app"},
	} {
		t.Run(tt.email, func(t *testing.T) {
			c := e.signedIn(tt.email)
			d := c.get("/docs", nil).doc(t)
			href, _ := d.Find(`[data-testid="docs-usage-link"]`).Attr("href")
			if href != tt.want {
				t.Fatalf("usage link = %q, want %q", href, tt.want)
			}
			if res := c.get(href, nil); res.StatusCode != http.StatusOK {
				t.Errorf("GET %s as %s: status %d", href, tt.email, res.StatusCode)
			}
		})
	}
}
