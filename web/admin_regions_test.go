package web_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/region"
	"github.com/sluicehq/sluice/web"
)

// TestUsageOverviewShowsRegions runs the overview of region eu in share
// mode with two peers: us answers and has its own usage series (a second
// engine store), ap does not. The line names the mode and eu's share, and
// the table each region's last hour or state.
func TestUsageOverviewShowsRegions(t *testing.T) {
	us := memstore.New(memstore.Options{})
	apDown := errors.New("ap unreachable")
	var rs *region.Store
	e := newEnvWith(t, func(d *web.Deps) {
		var err error
		rs, err = region.New(d.Limiter, region.Config{
			Region: "eu", Mode: region.Share,
			Regions: []region.Weight{{Name: "eu", Weight: 2}, {Name: "us", Weight: 1}, {Name: "ap", Weight: 1}},
		}, []region.PeerStore{
			{Name: "us", Ping: func(context.Context) error { return nil }},
			{Name: "ap", Ping: func(context.Context) error { return apDown }},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		d.Regions = rs
		d.RegionUsage = map[string]web.UsageReader{"us": us, "ap": us}
	})
	rs.Sync(context.Background()) // finds ap down
	gold := e.createPlan("gold", searchTier)
	k, _ := e.createKey(e.dev.ID, "ci")
	lim := gold.Limits[0].Enforce("gold")
	lim.Burst, lim.Limit = 4, 4
	for range 2 {
		if _, err := e.store.Allow(context.Background(), enforceRequest(k, lim)); err != nil {
			t.Fatal(err)
		}
	}
	for range 6 {
		if _, err := us.Allow(context.Background(), enforceRequest(k, lim)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE api_keys SET last_used_at = now() WHERE id = $1`, k.ID); err != nil {
		t.Fatal(err)
	}
	d := e.signedIn(operatorEmail).get("/admin", nil).doc(t)
	if got := text(d, "region-name") + " " + text(d, "region-mode"); got != "eu share" {
		t.Errorf("region line %q, want eu share", got)
	}
	if line := text(d, "regions"); !strings.Contains(line, "2/4") {
		t.Errorf("region line %q does not give eu's share 2/4", line)
	}
	var rows []string
	d.Find(`[data-testid="region-row"]`).Each(func(_ int, r *goquery.Selection) {
		var cells []string
		r.Find("td").Each(func(_ int, c *goquery.Selection) { cells = append(cells, strings.Join(strings.Fields(c.Text()), " ")) })
		rows = append(rows, strings.Join(cells, "|"))
	})
	want := []string{"eu|this region|2|0", "us|reachable|4|2", "ap|unreachable|unavailable"}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("region rows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}

	t.Run("DocsShowTheShare", func(t *testing.T) {
		// searchTier is 10 per minute with a burst of 20: eu's share (2 of
		// 4) is 5 and 10.
		doc := e.anonymous().get("/docs", nil).doc(t)
		got := doc.Find(`[data-testid="docs-limit"][data-plan="gold"] [data-testid="docs-limit-value"]`).First().Text()
		if strings.TrimSpace(got) != "5" {
			t.Errorf("docs show a limit of %q in region eu, want its share 5", got)
		}
		md := e.anonymous().get("/docs/limits.md", nil).body
		if !strings.Contains(md, "q=5") && !strings.Contains(md, "5 requests") {
			t.Errorf("Markdown docs do not show eu's share:\n%s", md)
		}
	})
}
