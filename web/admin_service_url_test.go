package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/web"
)

// TestServicePageSaysWhereTheProxyServesIt: a proxied service's page gives
// the URL the reverse proxy serves it at (Deps.ServiceURL), or says it is
// reachable nowhere, and its docs address their examples there, the status
// example to the portal.
func TestServicePageSaysWhereTheProxyServesIt(t *testing.T) {
	e := newEnvWith(t, func(d *web.Deps) {
		d.ServiceURL = func(_ *http.Request, consoleBase string, svc services.Service) string {
			if svc.Slug == "nowhere" {
				return ""
			}
			return "http://proxy.test:8090/proxy/" + svc.Slug
		}
	})
	c := e.signedIn(operatorEmail)
	repo := services.NewRepo(e.pool)
	for _, slug := range []string{"shop", "nowhere"} {
		if _, err := repo.Create(context.Background(), "test", services.Input{Slug: slug, Name: slug,
			Upstream: "http://10.0.0.5:8080", Routes: []string{"GET /" + slug + "/{id}"}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := text(c.get("/admin/services/shop", nil).doc(t), "service-url"); !strings.Contains(got, "http://proxy.test:8090/proxy/shop") {
		t.Errorf("shop's page says %q, want its proxy URL", got)
	}
	if got := text(c.get("/admin/services/nowhere", nil).doc(t), "service-url"); !strings.Contains(got, "PORTAL_PROXY_ADDR") {
		t.Errorf("nowhere's page says %q, want how to make it reachable", got)
	}
	if n := count(c.get("/admin/services/demo", nil).doc(t), "service-url"); n != 0 {
		t.Errorf("the demo service, not proxied, shows %d proxy URLs", n)
	}
	md := c.get("/docs/services/shop/limits.md", nil).body
	if !strings.Contains(md, `"http://proxy.test:8090/proxy/shop/shop/1"`) {
		t.Errorf("shop's docs do not call the proxy URL:\n%s", md)
	}
	if !strings.Contains(md, `"`+e.srv.URL+`/api/rate-limit-status"`) {
		t.Errorf("shop's docs do not ask the portal for the status:\n%s", md)
	}
}

// TestGatewayServiceDocsCallItsHost: a service behind its own gateway (no
// upstream) is called at its host name through that gateway, never on the
// console's origin, which would answer 404; without a host name the
// example names the gateway to put there.
func TestGatewayServiceDocsCallItsHost(t *testing.T) {
	e := newEnv(t)
	c := e.anonymous()
	repo := services.NewRepo(e.pool)
	if _, err := repo.Create(context.Background(), "test", services.Input{Slug: "widgets", Name: "Widgets",
		Hosts: []string{"widgets.example.com"}, Routes: []string{"GET /widgets/{id}"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Create(context.Background(), "test", services.Input{Slug: "bare", Name: "Bare",
		Routes: []string{"GET /bare/{id}"}}); err != nil {
		t.Fatal(err)
	}
	md := c.get("/docs/services/widgets/limits.md", nil).body
	if !strings.Contains(md, `"https://widgets.example.com/widgets/1"`) || strings.Contains(md, e.srv.URL+"/widgets/1") {
		t.Errorf("widgets' docs do not call its host through its gateway:\n%s", md)
	}
	if md := c.get("/docs/services/bare/limits.md", nil).body; !strings.Contains(md, `"https://YOUR-GATEWAY/bare/1"`) {
		t.Errorf("bare's docs do not name the gateway to call:\n%s", md)
	}
}
