package web_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestDocsPreviewSaysEachLimitOnce: a plan-wide quota is said once in the
// plan's docs preview, not once per route, and the example reset dates the
// preview and the docs show are in the future.
func TestDocsPreviewSaysEachLimitOnce(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("team",
		plans.LimitInput{Name: "team-day", Algorithm: "quota", Period: "day", Limit: 1000},
		plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 60},
		plans.LimitInput{Name: "items", Route: "GET /api/items/{id}", Algorithm: "token_bucket", Limit: 30, WindowSeconds: 60, Burst: 5},
	)
	c := e.signedIn(operatorEmail)
	d := c.get(fmt.Sprintf("/admin/plans/%d", p.ID), nil).doc(t)
	preview := d.Find(`[data-testid="docs-preview"]`)
	if n := preview.Find(`[data-testid="docs-limit"][data-policy="team-day"]`).Length(); n != 1 {
		t.Errorf("the plan-wide quota is said %d times in the preview, want once", n)
	}
	if n := preview.Find(`[data-testid="docs-endpoint"]`).Length(); n < 2 {
		t.Errorf("%d endpoints in the preview, want search and items", n)
	}
	resetRE := regexp.MustCompile(`X-RateLimit-Reset: (\d+)`)
	check := func(where, text string) {
		ms := resetRE.FindAllStringSubmatch(text, -1)
		if len(ms) == 0 {
			t.Errorf("%s shows no example reset", where)
		}
		for _, m := range ms {
			at, _ := strconv.ParseInt(m[1], 10, 64)
			if time.Unix(at, 0).Before(time.Now()) {
				t.Errorf("%s: example reset %s is in the past", where, time.Unix(at, 0).UTC())
			}
		}
	}
	var headers strings.Builder
	preview.Find(`[data-testid="docs-headers"]`).Each(func(_ int, s *goquery.Selection) { headers.WriteString(s.Text()) })
	check("the preview", headers.String())
	check("/docs/limits.md", e.anonymous().get("/docs/limits.md", nil).body)
}
