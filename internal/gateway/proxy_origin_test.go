package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/services"
)

// hostileUpstream records the credentials it receives and answers with
// cookies of Sluice's names, one of its own, a Clear-Site-Data and a CSP of
// its own.
type hostileUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	cookies  []string
	served   int
	apiKeys  []string
	lastPath string
}

func newHostileUpstream(t *testing.T) *hostileUpstream {
	t.Helper()
	u := &hostileUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.served++
		u.cookies = append(u.cookies, r.Header.Values("Cookie")...)
		u.apiKeys = append(u.apiKeys, r.Header.Get("X-API-Key"))
		u.lastPath = r.URL.Path
		u.mu.Unlock()
		h := w.Header()
		h.Add("Set-Cookie", "sluice_session=evil; Path=/; HttpOnly")
		h.Add("Set-Cookie", "__Host-sluice_session=evil; Path=/; Secure")
		h.Add("Set-Cookie", "Sluice_Secret_Once=evil; Path=/")
		h.Add("Set-Cookie", "upstream_session=theirs; Path=/")
		h.Set("Clear-Site-Data", `"cookies"`)
		h.Set("Content-Security-Policy", "default-src 'self'")
		h.Set("Content-Type", "text/html")
		io.WriteString(w, "<script>fetch('/admin/tokens', {method: 'POST'})</script>")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *hostileUpstream) seen() (int, []string, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.served, append([]string(nil), u.cookies...), append([]string(nil), u.apiKeys...)
}

// browserCookies is what a browser sends to the console's host name: the
// console's cookies and one of the upstream's.
const browserCookies = "sluice_session=SESSION; __Host-sluice_session=HOSTSESSION; sluice_secret_once=ONCE; upstream_session=theirs"

// TestProxyKeepsTheConsolesCookiesFromUpstreams sends requests carrying
// the console's cookies through every way the proxy is reached (issue 30,
// item 2): the upstream receives none of them but its own, the client
// gets none of the upstream's cookies of Sluice's names nor its
// Clear-Site-Data, and responses that may share the console's host name
// are sandboxed.
func TestProxyKeepsTheConsolesCookiesFromUpstreams(t *testing.T) {
	f := newFixture(t, nil)
	api := newHostileUpstream(t)
	f.setUpstream(t, api.URL) // host name shop.example.com
	listener := f.proxyServer(t)
	console := f.consoleServer(t, gateway.ProxyOrigin{})

	for _, tc := range []struct {
		name, base, host string
		cookies          bool
		wantSandbox      bool
	}{
		{"ByPathOnTheProxysListener", listener.URL + gateway.ProxyPrefix + "shop", "", true, true},
		{"ByHostOnTheProxysListener", listener.URL, "shop.example.com", false, false},
		{"ByHostOnTheProxysListenerWithConsoleCookies", listener.URL, "shop.example.com", true, true},
		{"ByHostOnTheConsolesListener", console.URL, "shop.example.com", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _, _ := api.seen()
			req, _ := http.NewRequest("GET", tc.base+"/items/1", nil)
			if tc.host != "" {
				req.Host = tc.host
			}
			req.Header.Set("X-API-Key", f.secret)
			if tc.cookies {
				req.Header.Set("Cookie", browserCookies)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			served, cookies, keys := api.seen()
			if res.StatusCode != http.StatusOK || served != before+1 {
				t.Fatalf("status %d, upstream served %d, want 200 and 1", res.StatusCode, served-before)
			}
			if got := cookies[len(cookies)-1:]; tc.cookies && (len(got) != 1 || got[0] != "upstream_session=theirs") {
				t.Errorf("upstream received Cookie %q, want only its own upstream_session=theirs", got)
			}
			if keys[len(keys)-1] != f.secret {
				t.Error("the upstream did not receive the caller's API key header")
			}
			var names []string
			for _, c := range res.Cookies() {
				names = append(names, c.Name+"="+c.Value)
			}
			if len(names) != 1 || names[0] != "upstream_session=theirs" {
				t.Errorf("the client got cookies %v, want only upstream_session=theirs", names)
			}
			if res.Header.Get("Clear-Site-Data") != "" {
				t.Error("the upstream's Clear-Site-Data reached the client")
			}
			csp := res.Header.Values("Content-Security-Policy")
			if sandboxed := strings.Contains(strings.Join(csp, ","), "sandbox"); sandboxed != tc.wantSandbox {
				t.Errorf("Content-Security-Policy %q: sandboxed %v, want %v", csp, sandboxed, tc.wantSandbox)
			}
			if !strings.Contains(strings.Join(csp, ","), "default-src 'self'") {
				t.Errorf("the upstream's own Content-Security-Policy was lost: %q", csp)
			}
		})
	}
}

// TestConsoleNeverServesProxiedContent: /proxy/<slug>/ on the console's
// listener redirects to the proxy's own listener, or is 404 without one,
// and never reaches the upstream (issue 30, item 1).
func TestConsoleNeverServesProxiedContent(t *testing.T) {
	f := newFixture(t, nil)
	api := newHostileUpstream(t)
	f.setUpstream(t, api.URL)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name     string
		origin   gateway.ProxyOrigin
		status   int
		location string
	}{
		{"NoProxyListener", gateway.ProxyOrigin{}, http.StatusNotFound, ""},
		{"DerivedProxyURL", gateway.ProxyOrigin{Port: "8090"}, http.StatusPermanentRedirect, "http://127.0.0.1:8090/proxy/shop/items/1?x=%2F"},
		{"ConfiguredProxyURL", gateway.ProxyOrigin{URL: "https://api.example.com/", Port: "8090"}, http.StatusPermanentRedirect, "https://api.example.com/proxy/shop/items/1?x=%2F"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			console := f.consoleServer(t, tc.origin)
			for _, method := range []string{"GET", "POST"} {
				req, _ := http.NewRequest(method, console.URL+"/proxy/shop/items/1?x=%2F", nil)
				req.Header.Set("X-API-Key", f.secret)
				req.Header.Set("Cookie", browserCookies)
				res, err := noFollow.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tc.status || res.Header.Get("Location") != tc.location {
					t.Errorf("%s: status %d Location %q, want %d %q", method, res.StatusCode, res.Header.Get("Location"), tc.status, tc.location)
				}
				if strings.Contains(string(body), "<script>") {
					t.Errorf("%s: the console served the upstream's page", method)
				}
			}
			if served, _, _ := api.seen(); served != 0 {
				t.Errorf("the upstream served %d requests through the console, want 0", served)
			}
		})
	}
}

func TestServiceURL(t *testing.T) {
	console := "https://sluice.example.com"
	req := httptest.NewRequest("GET", "https://sluice.example.com/admin/services/shop", nil)
	proxied := services.Service{Slug: "shop", Upstream: "http://10.0.0.5"}
	hosted := services.Service{Slug: "shop", Upstream: "http://10.0.0.5", Hosts: []string{"shop.example.com"}}
	for _, tc := range []struct {
		name   string
		origin gateway.ProxyOrigin
		svc    services.Service
		want   string
	}{
		{"NoUpstream", gateway.ProxyOrigin{Port: "8090"}, services.Service{Slug: "demo"}, ""},
		{"ByPathDerived", gateway.ProxyOrigin{Port: "8090"}, proxied, "http://sluice.example.com:8090/proxy/shop"},
		{"ByPathConfigured", gateway.ProxyOrigin{URL: "https://api.example.com", Port: "8090"}, proxied, "https://api.example.com/proxy/shop"},
		{"NowhereWithoutAListener", gateway.ProxyOrigin{}, proxied, ""},
		{"HostOnTheListener", gateway.ProxyOrigin{Port: "8090"}, hosted, "http://shop.example.com:8090"},
		{"HostOnTheConfiguredListener", gateway.ProxyOrigin{URL: "https://api.example.com", Port: "8090"}, hosted, "https://shop.example.com"},
		{"HostOnTheConsolesListener", gateway.ProxyOrigin{}, hosted, "https://shop.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.origin.ServiceURL(req, console, tc.svc); got != tc.want {
				t.Errorf("ServiceURL = %q, want %q", got, tc.want)
			}
		})
	}
}
