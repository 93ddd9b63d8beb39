package web_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/web"
)

func TestStrictTransportSecurity(t *testing.T) {
	const want = "max-age=31536000"
	https := http.Header{"X-Forwarded-Proto": {"https"}}
	t.Run("PlainHTTP", func(t *testing.T) {
		e := newEnv(t)
		if got := e.anonymous().get("/signin", nil).Header.Get("Strict-Transport-Security"); got != "" {
			t.Errorf("over plain HTTP: %q, want none", got)
		}
	})
	t.Run("TrustedProxySaysHTTPS", func(t *testing.T) {
		e := newEnv(t) // trusts 127.0.0.1
		for _, path := range []string{"/signin", "/no-such-page", "/"} {
			if got := e.anonymous().get(path, https).Header.Get("Strict-Transport-Security"); got != want {
				t.Errorf("%s: %q, want %q", path, got, want)
			}
		}
	})
	t.Run("UntrustedPeerSaysHTTPS", func(t *testing.T) {
		e := newEnvWith(t, func(d *web.Deps) { d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} })
		if got := e.anonymous().get("/signin", https).Header.Get("Strict-Transport-Security"); got != "" {
			t.Errorf("X-Forwarded-Proto from an untrusted peer: %q, want none", got)
		}
	})
	t.Run("DirectTLS", func(t *testing.T) {
		var ui http.Handler
		newEnvWith(t, func(d *web.Deps) { d.TrustedProxies = nil; ui = web.New(*d) })
		srv := httptest.NewTLSServer(ui)
		defer srv.Close()
		res, err := srv.Client().Get(srv.URL + "/signin")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Get("Strict-Transport-Security"); got != want {
			t.Errorf("over TLS: %q, want %q", got, want)
		}
	})
}
