package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestEveryDocsCurlExampleWorks runs, as written, every curl example the
// generated docs show (the HTML page and the Markdown, of the sample API
// and of a service the portal's reverse proxy serves) against a live portal
// with a developer's key: each reaches an endpoint that answers it (2xx, or
// 429 once its limit is spent), none a 404 or a 5xx.
func TestEveryDocsCurlExampleWorks(t *testing.T) {
	ctx := context.Background()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream served "+r.URL.Path)
	}))
	t.Cleanup(api.Close)
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	env["PORTAL_PROXY_ADDR"] = "127.0.0.1:0"
	p := startPortal(t, env)
	proxy := proxyRE.FindStringSubmatch(p.out.String())
	if proxy == nil {
		t.Fatalf("no reverse proxy address printed:\n%s", p.out)
	}
	pool, err := pgxpool.New(ctx, env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := services.NewRepo(pool).Create(ctx, "test", services.Input{Slug: "widgets", Name: "Widgets",
		Upstream: api.URL, Routes: []string{"GET /widgets/{id}", "POST /widgets"}}); err != nil {
		t.Fatal(err)
	}
	var dev int64
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, password_hash, role) VALUES ('d@example.com', 'x', 'developer') RETURNING id`).Scan(&dev); err != nil {
		t.Fatal(err)
	}
	_, secret, err := apikeys.NewService(pool, nil, slog.New(slog.DiscardHandler)).Create(ctx, "test", apikeys.NewKey{UserID: dev, Name: "docs"})
	if err != nil {
		t.Fatal(err)
	}
	// The new key and service reach the serving snapshot within a second.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest("GET", proxy[1]+"/proxy/widgets/widgets/0", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the portal did not take the new key within 30 s")
		}
	}

	var examples []string
	for _, page := range []string{"/docs", "/docs/services/widgets"} {
		status, body := get(t, p.url+page)
		if status != http.StatusOK {
			t.Fatalf("%s: status %d", page, status)
		}
		d, err := goquery.NewDocumentFromReader(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		d.Find(`[data-testid="docs-curl"]`).Each(func(_ int, s *goquery.Selection) { examples = append(examples, s.Text()) })
		status, md := get(t, p.url+page+"/limits.md")
		if status != http.StatusOK {
			t.Fatalf("%s/limits.md: status %d", page, status)
		}
		for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)\n```").FindAllStringSubmatch(md, -1) {
			if strings.HasPrefix(block[1], "curl") {
				examples = append(examples, block[1])
			}
		}
	}
	if len(examples) < 6 {
		t.Fatalf("only %d curl examples found", len(examples))
	}
	statusLine := regexp.MustCompile(`(?m)^HTTP/[0-9.]+ (\d{3})`)
	// The report's job id, as the docs tell a reader to take it from the
	// answer of POST /api/reports, which is shown (and run) first.
	location := regexp.MustCompile(`(?mi)^Location: \S*/api/jobs/(\S+)\s*$`)
	jobID := ""
	seen := map[string]bool{}
	for _, ex := range examples {
		if seen[ex] {
			continue
		}
		seen[ex] = true
		if strings.Contains(ex, "$JOB_ID") && jobID == "" {
			t.Errorf("%s: shown before any example starts a job", ex)
			continue
		}
		cmd := exec.Command("sh", "-c", ex+" --silent --show-error --max-time 20")
		cmd.Env = append(cmd.Environ(), "SLUICE_KEY="+secret, "JOB_ID="+jobID)
		out, err := cmd.CombinedOutput()
		if m := location.FindStringSubmatch(string(out)); m != nil {
			jobID = m[1]
		}
		m := statusLine.FindStringSubmatch(string(out))
		switch {
		case err != nil || m == nil:
			t.Errorf("%s: %v\n%s", ex, err, out)
		case m[1] == "404" || m[1][0] == '5' || (m[1][0] != '2' && m[1] != "429"):
			t.Errorf("%s: answered %s\n%s", ex, m[1], out)
		}
	}
	if !seen[`curl -i -H "Authorization: Bearer $SLUICE_KEY" "`+proxy[1]+`/proxy/widgets/widgets/1"`] {
		t.Errorf("no example calls the proxied service through the proxy; examples: %q", examples)
	}
}
