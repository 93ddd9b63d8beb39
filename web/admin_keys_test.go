package web_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
)

func TestKeysSearch(t *testing.T) {
	e := newEnv(t)
	other, err := e.users.Create(context.Background(), users.NewUser{Email: "other@corp.example", Password: testPassword, Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	ci, ciSecret := e.createKey(e.dev.ID, "ci pipeline")
	e.createKey(e.dev.ID, "laptop")
	prod, _ := e.createKey(other.ID, "production")
	if err := e.keys.Revoke(context.Background(), "test", prod.ID); err != nil {
		t.Fatal(err)
	}
	c := e.signedIn(operatorEmail)
	tests := []struct {
		name      string
		query     string
		header    http.Header
		wantNames []string
		wantTotal string
		wantPage  bool
	}{
		{name: "All", query: "", wantNames: []string{"production", "laptop", "ci pipeline"}, wantTotal: "3 keys", wantPage: true},
		{name: "ByName", query: "q=pipe", wantNames: []string{"ci pipeline"}, wantTotal: "1 key", wantPage: true},
		{name: "ByOwner", query: "q=corp.example", wantNames: []string{"production"}, wantTotal: "1 key", wantPage: true},
		{name: "ByPrefix", query: "q=" + url.QueryEscape(ciSecret[:12]), wantNames: []string{"ci pipeline"}, wantTotal: "1 key", wantPage: true},
		{name: "ByState", query: "state=revoked", wantNames: []string{"production"}, wantTotal: "1 key", wantPage: true},
		{name: "HTMXGetsResultsOnly", query: "q=laptop", header: htmx, wantNames: []string{"laptop"}, wantTotal: "1 key", wantPage: false},
		{name: "HistoryRestoreGetsWholePage", query: "q=laptop", header: http.Header{"Hx-Request": {"true"}, "Hx-History-Restore-Request": {"true"}},
			wantNames: []string{"laptop"}, wantTotal: "1 key", wantPage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := c.get("/admin/keys?"+tt.query, tt.header)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			d := res.doc(t)
			var names []string
			d.Find(`[data-testid="key-name"]`).Each(func(_ int, s *goquery.Selection) { names = append(names, s.Text()) })
			if !slices.Equal(names, tt.wantNames) {
				t.Errorf("names %q, want %q", names, tt.wantNames)
			}
			if got := text(d, "keys-total"); got != tt.wantTotal {
				t.Errorf("total %q, want %q", got, tt.wantTotal)
			}
			if got := count(d, "nav") == 1; got != tt.wantPage {
				t.Errorf("whole page = %v, want %v", got, tt.wantPage)
			}
		})
	}
	t.Run("RowShowsPlanStateAndPrefix", func(t *testing.T) {
		d := c.get("/admin/keys?q=pipe", nil).doc(t)
		row := d.Find(fmt.Sprintf(`[data-testid="key-row"][data-key="%d"]`, ci.ID))
		got := [3]string{
			strings.TrimSpace(row.Find(`[data-testid="key-prefix"]`).Text()),
			strings.TrimSpace(row.Find(`[data-testid="key-owner"]`).Text()),
			strings.TrimSpace(row.Find(`[data-testid="key-state"]`).Text()),
		}
		want := [3]string{ci.Prefix, developerEmail, "active"}
		if got != want {
			t.Errorf("row %q, want %q", got, want)
		}
	})
}

func TestKeyRevokeNeedsConfirmation(t *testing.T) {
	e := newEnv(t)
	k, _ := e.createKey(e.dev.ID, "ci")
	c := e.signedIn(operatorEmail)
	path := fmt.Sprintf("/admin/keys/%d/revoke", k.ID)
	res := c.get(path, nil)
	d := res.doc(t)
	if res.StatusCode != http.StatusOK || count(d, "revoke-confirm") != 1 {
		t.Fatalf("confirmation page: status %d, buttons %d", res.StatusCode, count(d, "revoke-confirm"))
	}
	if got, _ := e.keys.Get(context.Background(), k.ID); got.RevokedAt != nil {
		t.Fatal("showing the confirmation revoked the key")
	}
	res = c.post(path, nil, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: status %d", res.StatusCode)
	}
	got, _ := e.keys.Get(context.Background(), k.ID)
	if got.State(time.Now()) != apikeys.StateRevoked {
		t.Fatalf("state %q after revoke", got.State(time.Now()))
	}
	d = c.get(fmt.Sprintf("/admin/keys/%d", k.ID), nil).doc(t)
	if got := text(d, "key-state"); got != "revoked" {
		t.Errorf("key page state %q", got)
	}
	if count(d, "key-revoke") != 0 || count(d, "override-form") != 0 {
		t.Errorf("a revoked key still offers changes")
	}
	if res := c.post(path, nil, nil); res.StatusCode != http.StatusSeeOther {
		t.Errorf("revoking twice: status %d", res.StatusCode)
	}
}

func TestKeyPlanAndOverrides(t *testing.T) {
	e := newEnv(t)
	gold := e.createPlan("gold", searchTier)
	k, _ := e.createKey(e.dev.ID, "ci")
	c := e.signedIn(operatorEmail)
	base := fmt.Sprintf("/admin/keys/%d", k.ID)

	t.Run("SetPlan", func(t *testing.T) {
		res := c.post(base+"/plan", url.Values{"plan_id": {fmt.Sprint(gold.ID)}}, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d", res.StatusCode)
		}
		got, _ := e.keys.Get(context.Background(), k.ID)
		if got.PlanID == nil || *got.PlanID != gold.ID || got.PlanSlug != "gold" {
			t.Errorf("plan %v %q", got.PlanID, got.PlanSlug)
		}
	})
	t.Run("SetPlanGarbage", func(t *testing.T) {
		res := c.post(base+"/plan", url.Values{"plan_id": {"gold"}}, nil)
		if res.StatusCode != http.StatusUnprocessableEntity || text(res.doc(t), "error-plan_id") != "choose a plan from the list" {
			t.Errorf("status %d error %q", res.StatusCode, text(res.doc(t), "error-plan_id"))
		}
	})
	cur, _ := e.keys.Get(context.Background(), k.ID)
	t.Run("OverrideFieldErrors", func(t *testing.T) {
		form := tierForm(cur.Version, "search", "GET /api/search", "token_bucket", "0", "60", "0", "1", "reject")
		res := c.post(base+"/overrides", form, nil)
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("status %d", res.StatusCode)
		}
		if got := text(res.doc(t), "error-limit"); got != "must be at least 1" {
			t.Errorf("limit error %q", got)
		}
	})
	t.Run("OverrideSaved", func(t *testing.T) {
		form := tierForm(cur.Version, "search", "GET /api/search", "token_bucket", "500", "60", "0", "1", "reject")
		res := c.post(base+"/overrides", form, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d: %s", res.StatusCode, text(res.doc(t), "conflict"))
		}
		got, _ := e.keys.Get(context.Background(), k.ID)
		if len(got.Overrides) != 1 || got.Overrides[0].Name != "search" || got.Overrides[0].Limit != 500 {
			t.Errorf("overrides %+v", got.Overrides)
		}
		d := c.get(base, nil).doc(t)
		if n := count(d, "override-row"); n != 1 {
			t.Errorf("%d override rows shown", n)
		}
	})
	t.Run("OverrideStaleVersion", func(t *testing.T) {
		form := tierForm(cur.Version, "search", "GET /api/search", "token_bucket", "7", "60", "0", "1", "reject")
		res := c.post(base+"/overrides", form, nil)
		if res.StatusCode != http.StatusConflict || !strings.HasPrefix(text(res.doc(t), "conflict"), "Someone else changed this key") {
			t.Errorf("status %d conflict %q", res.StatusCode, text(res.doc(t), "conflict"))
		}
	})
	t.Run("OverrideRemoved", func(t *testing.T) {
		now, _ := e.keys.Get(context.Background(), k.ID)
		res := c.post(base+"/overrides/delete", url.Values{"version": {fmt.Sprint(now.Version)}, "name": {"search"}}, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d", res.StatusCode)
		}
		got, _ := e.keys.Get(context.Background(), k.ID)
		if len(got.Overrides) != 0 {
			t.Errorf("overrides %+v", got.Overrides)
		}
	})
}

func TestDeveloperPlanChangeIsAudited(t *testing.T) {
	e := newEnv(t)
	gold := e.createPlan("gold")
	c := e.signedIn(operatorEmail)
	path := fmt.Sprintf("/admin/developers/%d/plan", e.dev.ID)
	res := c.post(path, url.Values{"plan_id": {fmt.Sprint(gold.ID)}, "version": {fmt.Sprint(e.dev.Version)}}, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d", res.StatusCode)
	}
	u, _ := e.users.ByID(context.Background(), e.dev.ID)
	if u.PlanID == nil || *u.PlanID != gold.ID {
		t.Fatalf("plan %v", u.PlanID)
	}
	res = c.post(path, url.Values{"plan_id": {""}, "version": {fmt.Sprint(e.dev.Version)}}, nil)
	if res.StatusCode != http.StatusConflict || text(res.doc(t), "error-plan_id") == "" {
		t.Errorf("stale version: status %d", res.StatusCode)
	}
	d := c.get(fmt.Sprintf("/admin/audit?object_type=user&object_id=%d", e.dev.ID), nil).doc(t)
	if got := text(d, "audit-row-action"); got != "user.set_plan" {
		t.Errorf("audit action %q", got)
	}
	if got := text(d, "audit-row-actor"); got != operatorEmail {
		t.Errorf("audit actor %q", got)
	}
	if n := count(c.get("/admin/developers", nil).doc(t), "developer-row"); n != 1 {
		t.Errorf("%d developer rows, want 1 (operators are not listed)", n)
	}
}

func TestAuditFilters(t *testing.T) {
	e := newEnv(t)
	p := e.createPlan("gold", searchTier)
	k, _ := e.createKey(e.dev.ID, "ci")
	c := e.signedIn(operatorEmail)
	if res := c.post(fmt.Sprintf("/admin/keys/%d/revoke", k.ID), nil, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatal(res.StatusCode)
	}
	future := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04")
	tests := []struct {
		name        string
		query       string
		wantStatus  int
		wantActions []string
		wantError   string
	}{
		{"All", "", 200, []string{"key.revoke", "key.create", "plan.create"}, ""},
		{"ByActor", "actor=" + url.QueryEscape(fmt.Sprintf("user:%d", e.operator.ID)), 200, []string{"key.revoke"}, ""},
		{"ByObject", fmt.Sprintf("object_type=plan&object_id=%d", p.ID), 200, []string{"plan.create"}, ""},
		{"ByObjectType", "object_type=key", 200, []string{"key.revoke", "key.create"}, ""},
		{"SinceFuture", "since=" + future, 200, nil, ""},
		{"UntilFuture", "until=" + future + "&object_type=plan", 200, []string{"plan.create"}, ""},
		{"BadTime", "since=yesterday", 422, nil, "must be a date and time such as 2026-01-31T14:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := c.get("/admin/audit?"+tt.query, nil)
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status %d", res.StatusCode)
			}
			d := res.doc(t)
			var actions []string
			d.Find(`[data-testid="audit-row-action"]`).Each(func(_ int, s *goquery.Selection) { actions = append(actions, s.Text()) })
			if !slices.Equal(actions, tt.wantActions) {
				t.Errorf("actions %q, want %q", actions, tt.wantActions)
			}
			if got := text(d, "error-since"); got != tt.wantError {
				t.Errorf("since error %q, want %q", got, tt.wantError)
			}
		})
	}
}

func TestUsageOverviewAndLiveView(t *testing.T) {
	e := newEnv(t)
	gold := e.createPlan("gold", searchTier)
	k, _ := e.createKey(e.dev.ID, "ci")
	if _, err := e.keys.SetPlan(context.Background(), "test", k.ID, &gold.ID); err != nil {
		t.Fatal(err)
	}
	lim := gold.Limits[0].Enforce("gold")
	lim.Burst, lim.Limit = 3, 3 // a tiny bucket, so some requests are rejected
	for range 5 {
		if _, err := e.store.Allow(context.Background(), enforceRequest(k, lim)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE api_keys SET last_used_at = now() WHERE id = $1`, k.ID); err != nil {
		t.Fatal(err)
	}
	c := e.signedIn(operatorEmail)

	t.Run("Overview", func(t *testing.T) {
		d := c.get("/admin", nil).doc(t)
		got := [4]string{text(d, "total-admitted"), text(d, "total-rejected"),
			strings.TrimSpace(d.Find(`[data-testid="consumer-row"] td`).First().Text()),
			strings.TrimSpace(d.Find(`[data-testid="rejected-row"] td`).First().Text())}
		want := [4]string{"3", "2", "all keys (" + developerEmail + ")", "GET /api/search"}
		if got != want {
			t.Errorf("overview %q, want %q", got, want)
		}
		if path, _ := d.Find(`[data-testid="usage-chart"] path.admitted`).Attr("d"); !strings.HasPrefix(path, "M") {
			t.Errorf("chart has no admitted bars: %q", path)
		}
	})
	t.Run("OverviewFragmentForHTMX", func(t *testing.T) {
		res := c.get("/admin", htmx)
		d := res.doc(t)
		if count(d, "overview") != 1 || count(d, "nav") != 0 {
			t.Errorf("fragment: overview %d nav %d", count(d, "overview"), count(d, "nav"))
		}
	})
	t.Run("LivePage", func(t *testing.T) {
		res := c.get(fmt.Sprintf("/admin/live?keys=%d", k.ID), nil)
		d := res.doc(t)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d", res.StatusCode)
		}
		if sse, _ := d.Find(`[data-testid="live-stream"]`).Attr("sse-connect"); sse != fmt.Sprintf("/admin/live/stream?keys=%d", k.ID) {
			t.Errorf("sse-connect %q", sse)
		}
		if got := text(d, "live-admitted"); got != "3" {
			t.Errorf("admitted %q", got)
		}
		if d.Find(`script[src="/static/htmx-ext-sse-2.2.4.min.js"]`).Length() != 1 {
			t.Errorf("the SSE extension is not loaded")
		}
	})
	t.Run("LivePageAppliesOverrides", func(t *testing.T) {
		cur, _ := e.keys.Get(context.Background(), k.ID)
		o := searchTier
		o.Limit, o.Burst = 500, 0
		if _, err := e.keys.SetOverrides(context.Background(), "test", k.ID, cur.Version, []plans.LimitInput{o}); err != nil {
			t.Fatal(err)
		}
		d := c.get(fmt.Sprintf("/admin/live?keys=%d", k.ID), nil).doc(t)
		row := d.Find(`[data-testid="live-limit"][data-limit="gold-search"]`)
		// A token bucket's gauge is out of its burst, which is the limit when
		// the override sets none.
		if got := strings.TrimSpace(row.Find(`[data-testid="live-max"]`).Text()); row.Length() != 1 || got != "500" {
			t.Errorf("override row %d, tokens out of %q, want the override's 500", row.Length(), got)
		}
	})
	t.Run("LivePageBadInput", func(t *testing.T) {
		for _, q := range []string{"keys=abc", "keys=1,2,3,4,5,6,7,8,9,10,11", "keys=999999"} {
			res := c.get("/admin/live?"+q, nil)
			if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusNotFound || text(res.doc(t), "live-error") == "" {
				t.Errorf("%s: status %d, error %q", q, res.StatusCode, text(res.doc(t), "live-error"))
			}
		}
	})
	t.Run("StreamPushesWhatChanged", func(t *testing.T) {
		// The stream pushes on its own tick; the test waits for the push
		// that shows a decision made after the first one, never for a time.
		// The deadline only ends a stream that has stopped pushing.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+fmt.Sprintf("/admin/live/stream?keys=%d", k.ID), nil)
		res, err := c.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("status %d type %q", res.StatusCode, res.Header.Get("Content-Type"))
		}
		cur, err := e.keys.Get(context.Background(), k.ID)
		if err != nil {
			t.Fatal(err)
		}
		limits, err := e.plans.KeyLimits(context.Background(), cur.PlanSlug, cur.Overrides)
		if err != nil {
			t.Fatal(err)
		}
		// The search tier is a token bucket: its gauge is the tokens left,
		// so one more request shows as one fewer (the clock stands still,
		// nothing refills).
		leftRE := regexp.MustCompile(`data-testid="live-left">(\d+)<`)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var used []int
		inEvent := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == fmt.Sprintf("event: key-%d", k.ID):
				inEvent = true
			case inEvent && strings.HasPrefix(line, "data: "):
				m := leftRE.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				n, _ := strconv.Atoi(m[1])
				used = append(used, n)
				inEvent = false
				if len(used) == 1 {
					if _, err := e.store.Allow(context.Background(), enforce.Request{Subject: enforce.DeveloperSubject(cur.UserID), Key: enforce.KeyScope(k.ID), Route: "GET /api/search", Limits: limits}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if len(used) > 1 && used[len(used)-1] == used[0]-1 {
				break
			}
		}
		if len(used) < 2 || used[len(used)-1] != used[0]-1 {
			t.Fatalf("pushes showed tokens left %v before the stream ended (%v), want a push showing %d after one more request", used, sc.Err(), firstOr(used)-1)
		}
		for _, n := range used[1 : len(used)-1] {
			if n != used[0] {
				t.Errorf("pushes showed tokens left %v: a change before the request was made", used)
			}
		}
	})
}

// firstOr is the first value of s, or 0.
func firstOr(s []int) int {
	if len(s) == 0 {
		return 0
	}
	return s[0]
}
