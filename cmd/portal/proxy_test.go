package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/testenv"
)

var proxyRE = regexp.MustCompile(`The reverse proxy is served on (http://\S+)`)

// TestRunServesTheProxyOffTheConsole starts the portal with
// PORTAL_PROXY_ADDR (issue 30, item 1): the console's /proxy/ redirects to
// the proxy's own listener without reaching the upstream, and every curl
// example the docs give for proxied services, run as written, reaches the
// upstream through the proxy.
func TestRunServesTheProxyOffTheConsole(t *testing.T) {
	ctx := context.Background()
	var served atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		io.WriteString(w, "upstream served "+r.URL.Path)
	}))
	t.Cleanup(api.Close)
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_PROXY_ADDR"] = "127.0.0.1:0"
	p := startPortal(t, env)
	m := proxyRE.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no reverse proxy address printed:\n%s", p.out)
	}
	proxyURL := m[1]
	proxyPort := proxyURL[strings.LastIndexByte(proxyURL, ':')+1:]

	pool, err := pgxpool.New(ctx, env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	repo := services.NewRepo(pool)
	for _, in := range []services.Input{
		{Slug: "shop", Name: "Shop", Upstream: api.URL, Routes: []string{"GET /items/{id}"}},
		{Slug: "hosted", Name: "Hosted", Hosts: []string{"hosted.example.com"}, Upstream: api.URL, Routes: []string{"GET /things/{id}"}},
	} {
		if _, err := repo.Create(ctx, "test", in); err != nil {
			t.Fatal(err)
		}
	}
	var dev int64
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ('d@example.com', 'x', 'developer') RETURNING id`).Scan(&dev); err != nil {
		t.Fatal(err)
	}
	_, secret, err := apikeys.NewService(pool, nil, slog.New(slog.DiscardHandler)).Create(ctx, "test", apikeys.NewKey{UserID: dev, Name: "docs"})
	if err != nil {
		t.Fatal(err)
	}
	ready := func() bool {
		req, _ := http.NewRequest("GET", proxyURL+"/proxy/shop/items/0", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
	for deadline := time.Now().Add(30 * time.Second); !ready(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the proxy did not serve the new service and key within 30 s")
		}
	}

	t.Run("TheConsoleRedirects", func(t *testing.T) {
		before := served.Load()
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req, _ := http.NewRequest("GET", p.url+"/proxy/shop/items/1?q=1", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != proxyURL+"/proxy/shop/items/1?q=1" {
			t.Errorf("status %d Location %q, want 308 to %s", res.StatusCode, res.Header.Get("Location"), proxyURL+"/proxy/shop/items/1?q=1")
		}
		if strings.Contains(string(body), "upstream served") || served.Load() != before {
			t.Error("the console's address reached the upstream")
		}
	})

	for _, tc := range []struct {
		slug, want string
		// resolve is what DNS would say of the service's host name.
		resolve []string
	}{
		{"shop", proxyURL + "/proxy/shop/items/1", nil},
		{"hosted", "http://hosted.example.com:" + proxyPort + "/things/1", []string{"--resolve", "hosted.example.com:" + proxyPort + ":127.0.0.1"}},
	} {
		t.Run("DocsCurl/"+tc.slug, func(t *testing.T) {
			status, md := get(t, p.url+"/docs/services/"+tc.slug+"/limits.md")
			if status != http.StatusOK {
				t.Fatalf("docs: status %d", status)
			}
			var endpoint, statusCurl string
			for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)\n```").FindAllStringSubmatch(md, -1) {
				switch {
				case strings.Contains(block[1], "/api/rate-limit-status"):
					statusCurl = block[1]
				case strings.HasPrefix(block[1], "curl"):
					endpoint = block[1]
				}
			}
			if !strings.Contains(endpoint, `"`+tc.want+`"`) {
				t.Fatalf("the endpoint's curl example is %q, want it to call %s", endpoint, tc.want)
			}
			if !strings.Contains(statusCurl, `"`+p.url+"/api/rate-limit-status") {
				t.Errorf("the status curl example is %q, want it on the portal %s", statusCurl, p.url)
			}
			before := served.Load()
			cmd := exec.Command("sh", "-c", endpoint+" "+strings.Join(tc.resolve, " ")+" --silent --show-error")
			cmd.Env = append(cmd.Environ(), "SLUICE_KEY="+secret)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "HTTP/1.1 200") || !strings.Contains(string(out), "upstream served /") || served.Load() != before+1 {
				t.Errorf("running %q: %v\n%s", endpoint, err, out)
			}
			if u, _ := url.Parse(tc.want); u.Port() != proxyPort {
				t.Errorf("the example calls port %s, not the proxy's %s", u.Port(), proxyPort)
			}
		})
	}
}
